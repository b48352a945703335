//! A reader of the pickles `torch.cuda.memory._dump_snapshot()` writes:
//! plain data (dicts, lists, tuples, strings, numbers) in pickle protocols
//! 2 to 5, read from a stream, never executing anything. A pickle that
//! names a Python class or function (`GLOBAL`, `REDUCE`) is refused: a
//! memory snapshot holds none, and loading one would run code.
//!
//! Why not serde-pickle: it builds every value afresh where the pickle
//! refers back to one it already holds (its memo), and keeps every
//! container the pickler memoized (all of them) until the end, which puts
//! a snapshot of a few hundred MB at several GB. Here the two shapes that
//! make up nearly all of a snapshot are made compact as soon as they are
//! complete — a stack frame (`{filename, line, name}`), interned, and a
//! trace event (`{action, addr, size, stream, frames}`) — in the memo too,
//! so oomgate's memory while reading stays a fraction of the file's size
//! (docs/performance.md). `keep_events: false` drops the events as they
//! are read (files over 1 GiB are summarised from `segments` alone).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Read;
use std::rc::Rc;

/// A value of the pickle.
#[derive(Debug, Clone)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond 64 bits (pickle's LONG), or a float.
    Float(f64),
    Str(Rc<str>),
    /// Bytes are not kept.
    Bytes,
    List(Rc<Container>),
    // Thin pointers only: a value is 16 bytes, and the memo holds one per
    // container of the file.
    Tuple(Rc<Vec<Value>>),
    Dict(Rc<Container>),
    Frame(Rc<Frame>),
    /// A list of frames, interned.
    Frames(Stack),
    Event(Rc<Event>),
}

/// A stack of frames, innermost first, interned.
pub type Stack = Rc<Vec<Rc<Frame>>>;

/// A list or dict while it is read, and after: its items (a dict's as
/// key, value pairs in turn), and the memo slot it was put in, so that it
/// can be replaced there when it is made compact.
#[derive(Debug, Default)]
pub struct Container {
    pub items: RefCell<Vec<Value>>,
    memo: Cell<Option<u32>>,
}

impl Container {
    /// A list's frames (anything else in it left out).
    pub fn frames(&self) -> Vec<Rc<Frame>> {
        self.items
            .borrow()
            .iter()
            .filter_map(|v| match v {
                Value::Frame(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    /// A dict's number for `key`, as bytes or an address: a negative or
    /// missing one is `None`.
    pub fn number(&self, key: &str) -> Option<u64> {
        match self.get(key) {
            Some(Value::Int(n)) => u64::try_from(n).ok(),
            Some(Value::Float(f)) if f >= 0.0 => Some(f as u64),
            _ => None,
        }
    }

    /// A dict's value for `key`.
    pub fn get(&self, key: &str) -> Option<Value> {
        let items = self.items.borrow();
        items
            .chunks_exact(2)
            .find(|pair| matches!(&pair[0], Value::Str(k) if &**k == key))
            .map(|pair| pair[1].clone())
    }
}

/// One frame of a stack: `{filename, line, name}`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: Rc<str>,
    pub line: i64,
    pub name: Rc<str>,
}

/// What the allocator did (`TraceEntry.action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
    Other,
}

/// One entry of a device's trace.
#[derive(Debug)]
pub struct Event {
    pub action: Action,
    pub addr: Option<u64>,
    pub size: u64,
    pub frames: Stack,
}

/// Why a file is not a snapshot pickle this reader can read.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a pickle of protocol 2 or later (it starts with byte 0x{0:02x})")]
    NotBinary(u8),
    #[error("opcode 0x{opcode:02x} at byte {at} is not plain data ({what}): not a memory snapshot")]
    Unsupported {
        opcode: u8,
        at: u64,
        what: &'static str,
    },
    #[error("damaged at byte {at}: {why}")]
    Damaged { at: u64, why: String },
    #[error("it ends before its STOP opcode")]
    Truncated,
}

/// Read one pickle from `input`.
pub fn read(input: impl Read, keep_events: bool) -> Result<Value, PickleError> {
    Machine::new(input, keep_events).run()
}

/// The most items a pickle may put on the stack or in its memo: far more
/// than any snapshot holds, and a bound on a damaged file.
const MAX_SLOTS: usize = 1 << 28;
/// The longest string accepted (a frame's name, a settings value).
const MAX_STRING: u64 = 64 * 1024 * 1024;

struct Machine<R> {
    input: R,
    at: u64,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Value>,
    strings: HashMap<Rc<str>, ()>,
    frames: HashMap<Rc<Frame>, ()>,
    stacks: HashMap<Vec<*const Frame>, Stack>,
    keep_events: bool,
}

impl<R: Read> Machine<R> {
    fn new(input: R, keep_events: bool) -> Self {
        Machine {
            input,
            at: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            strings: HashMap::new(),
            frames: HashMap::new(),
            stacks: HashMap::new(),
            keep_events,
        }
    }

    fn damaged(&self, why: impl Into<String>) -> PickleError {
        PickleError::Damaged {
            at: self.at,
            why: why.into(),
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let mut buffer = [0u8; N];
        self.input
            .read_exact(&mut buffer)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => PickleError::Truncated,
                _ => PickleError::Io(e),
            })?;
        self.at += N as u64;
        Ok(buffer)
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.bytes::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn vec(&mut self, len: u64) -> Result<Vec<u8>, PickleError> {
        if len > MAX_STRING {
            return Err(self.damaged(format!("a string of {len} bytes")));
        }
        let mut buffer = Vec::with_capacity(len as usize);
        (&mut self.input)
            .take(len)
            .read_to_end(&mut buffer)
            .map_err(PickleError::Io)?;
        if buffer.len() as u64 != len {
            return Err(PickleError::Truncated);
        }
        self.at += len;
        Ok(buffer)
    }

    fn skip(&mut self, len: u64) -> Result<(), PickleError> {
        let copied = std::io::copy(&mut (&mut self.input).take(len), &mut std::io::sink())?;
        if copied != len {
            return Err(PickleError::Truncated);
        }
        self.at += len;
        Ok(())
    }

    fn string(&mut self, len: u64) -> Result<Value, PickleError> {
        let bytes = self.vec(len)?;
        let text =
            String::from_utf8(bytes).map_err(|_| self.damaged("a string that is not UTF-8"))?;
        Ok(Value::Str(self.intern(&text)))
    }

    fn intern(&mut self, text: &str) -> Rc<str> {
        if let Some((found, ())) = self.strings.get_key_value(text) {
            return found.clone();
        }
        let rc: Rc<str> = Rc::from(text);
        self.strings.insert(rc.clone(), ());
        rc
    }

    fn push(&mut self, value: Value) -> Result<(), PickleError> {
        if self.stack.len() >= MAX_SLOTS {
            return Err(self.damaged("too deep"));
        }
        self.stack.push(value);
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        self.stack
            .pop()
            .ok_or_else(|| self.damaged("an empty stack"))
    }

    fn top(&self) -> Result<&Value, PickleError> {
        self.stack
            .last()
            .ok_or_else(|| self.damaged("an empty stack"))
    }

    /// The items since the last MARK, taken off the stack.
    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.damaged("no MARK"))?;
        if mark > self.stack.len() {
            return Err(self.damaged("a MARK above the stack"));
        }
        Ok(self.stack.split_off(mark))
    }

    fn memoize(&mut self, slot: usize) -> Result<(), PickleError> {
        if slot >= MAX_SLOTS {
            return Err(self.damaged(format!("memo slot {slot}")));
        }
        let value = self.top()?.clone();
        if let Value::List(c) | Value::Dict(c) = &value {
            if c.memo.get().is_none() {
                c.memo.set(u32::try_from(slot).ok());
            }
        }
        if slot >= self.memo.len() {
            self.memo.resize(slot + 1, Value::None);
        }
        self.memo[slot] = value;
        Ok(())
    }

    fn recall(&mut self, slot: usize) -> Result<(), PickleError> {
        let value = self
            .memo
            .get(slot)
            .cloned()
            .ok_or_else(|| self.damaged(format!("memo slot {slot} was never set")))?;
        self.push(value)
    }

    /// Add `items` to the list or dict now on top of the stack, then make
    /// it compact if it is a frame or an event.
    fn extend_top(&mut self, items: Vec<Value>, dict: bool) -> Result<(), PickleError> {
        if dict && items.len() % 2 != 0 {
            return Err(self.damaged("a dict item without its value"));
        }
        let container = match (self.top()?, dict) {
            (Value::Dict(c), true) | (Value::List(c), false) => c.clone(),
            _ => return Err(self.damaged("items added to what is not a container")),
        };
        container.items.borrow_mut().extend(items);
        if dict {
            if let Some(compact) = self.compact(&container) {
                if let Some(slot) = container.memo.get() {
                    self.memo[slot as usize] = compact.clone();
                }
                let last = self.stack.len() - 1;
                self.stack[last] = compact;
            }
        }
        Ok(())
    }

    /// A frame or a trace event, made compact; `None` for any other dict.
    fn compact(&mut self, dict: &Container) -> Option<Value> {
        if let (Some(Value::Str(filename)), Some(Value::Int(line)), Some(Value::Str(name))) =
            (dict.get("filename"), dict.get("line"), dict.get("name"))
        {
            let frame = Frame {
                filename,
                line,
                name,
            };
            if let Some((found, ())) = self.frames.get_key_value(&frame) {
                return Some(Value::Frame(found.clone()));
            }
            let frame = Rc::new(frame);
            self.frames.insert(frame.clone(), ());
            return Some(Value::Frame(frame));
        }
        let Some(Value::Str(action)) = dict.get("action") else {
            return None;
        };
        if !self.keep_events {
            return Some(Value::None);
        }
        let frames = match dict.get("frames") {
            Some(Value::List(list)) => {
                let frames = self.stack_of(&list);
                if let Some(slot) = list.memo.get() {
                    self.memo[slot as usize] = Value::Frames(frames.clone());
                }
                frames
            }
            Some(Value::Frames(frames)) => frames,
            _ => Rc::new(Vec::new()),
        };
        Some(Value::Event(Rc::new(Event {
            action: match &*action {
                "alloc" => Action::Alloc,
                "free_requested" => Action::FreeRequested,
                "free_completed" => Action::FreeCompleted,
                "segment_alloc" => Action::SegmentAlloc,
                "segment_free" => Action::SegmentFree,
                "segment_map" => Action::SegmentMap,
                "segment_unmap" => Action::SegmentUnmap,
                "oom" => Action::Oom,
                "snapshot" => Action::Snapshot,
                _ => Action::Other,
            },
            addr: dict.number("addr"),
            size: dict.number("size").unwrap_or(0),
            frames,
        })))
    }

    /// A list of frames, interned: the same stack is held once.
    fn stack_of(&mut self, list: &Container) -> Stack {
        let frames = list.frames();
        let key: Vec<*const Frame> = frames.iter().map(Rc::as_ptr).collect();
        if let Some(found) = self.stacks.get(&key) {
            return found.clone();
        }
        let interned: Stack = Rc::new(frames);
        self.stacks.insert(key, interned.clone());
        interned
    }

    fn run(mut self) -> Result<Value, PickleError> {
        let first = self.byte()?;
        if first != 0x80 {
            return Err(PickleError::NotBinary(first));
        }
        let protocol = self.byte()?;
        if !(2..=5).contains(&protocol) {
            return Err(self.damaged(format!("protocol {protocol}")));
        }
        loop {
            let at = self.at;
            let opcode = self.byte()?;
            let unsupported = |what| PickleError::Unsupported { opcode, at, what };
            match opcode {
                b'.' => return self.pop(),
                0x95 => {
                    // FRAME: a length hint only.
                    self.u64()?;
                }
                0x80 => {
                    self.byte()?;
                }
                b'}' => self.push(Value::Dict(Rc::default()))?,
                b']' | 0x8f => self.push(Value::List(Rc::default()))?,
                b')' => self.push(Value::Tuple(Rc::new(Vec::new())))?,
                b'(' => self.marks.push(self.stack.len()),
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.extend_top(vec![key, value], true)?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.extend_top(items, true)?;
                }
                b'a' => {
                    let value = self.pop()?;
                    self.extend_top(vec![value], false)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.extend_top(items, false)?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Value::List(Rc::new(Container {
                        items: RefCell::new(items),
                        memo: Cell::new(None),
                    })))?;
                }
                b'J' => {
                    let n = i32::from_le_bytes(self.bytes()?);
                    self.push(Value::Int(i64::from(n)))?;
                }
                b'K' => {
                    let n = self.byte()?;
                    self.push(Value::Int(i64::from(n)))?;
                }
                b'M' => {
                    let n = u16::from_le_bytes(self.bytes()?);
                    self.push(Value::Int(i64::from(n)))?;
                }
                0x8a | 0x8b => {
                    let len = if opcode == 0x8a {
                        u64::from(self.byte()?)
                    } else {
                        u64::from(self.u32()?)
                    };
                    let bytes = self.vec(len)?;
                    self.push(long(&bytes))?;
                }
                b'G' => {
                    let f = f64::from_be_bytes(self.bytes()?);
                    self.push(Value::Float(f))?;
                }
                0x8c => {
                    let len = u64::from(self.byte()?);
                    let value = self.string(len)?;
                    self.push(value)?;
                }
                b'X' => {
                    let len = u64::from(self.u32()?);
                    let value = self.string(len)?;
                    self.push(value)?;
                }
                0x8d => {
                    let len = self.u64()?;
                    let value = self.string(len)?;
                    self.push(value)?;
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let len = match opcode {
                        b'C' => u64::from(self.byte()?),
                        b'B' => u64::from(self.u32()?),
                        _ => self.u64()?,
                    };
                    self.skip(len)?;
                    self.push(Value::Bytes)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Tuple(Rc::new(items)))?;
                }
                0x85..=0x87 => {
                    let n = usize::from(opcode - 0x84);
                    if self.stack.len() < n {
                        return Err(self.damaged("a tuple of more items than the stack holds"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.push(Value::Tuple(Rc::new(items)))?;
                }
                0x94 => self.memoize(self.memo.len())?,
                b'q' => {
                    let slot = usize::from(self.byte()?);
                    self.memoize(slot)?;
                }
                b'r' => {
                    let slot = self.u32()? as usize;
                    self.memoize(slot)?;
                }
                b'h' => {
                    let slot = usize::from(self.byte()?);
                    self.recall(slot)?;
                }
                b'j' => {
                    let slot = self.u32()? as usize;
                    self.recall(slot)?;
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?.clone();
                    self.push(top)?;
                }
                b'c' | 0x93 => return Err(unsupported("a Python class or function")),
                b'R' | 0x81 | 0x92 | b'b' | b'o' | b'i' => {
                    return Err(unsupported("an object built by calling code"));
                }
                0x97 | 0x98 => return Err(unsupported("an out-of-band buffer")),
                _ => return Err(unsupported("an opcode of pickle protocol 0 or 1, or none")),
            }
        }
    }
}

/// pickle's LONG: little-endian two's complement of any length.
fn long(bytes: &[u8]) -> Value {
    if bytes.len() <= 8 {
        let mut buffer = if bytes.last().is_some_and(|b| b & 0x80 != 0) {
            [0xffu8; 8]
        } else {
            [0u8; 8]
        };
        buffer[..bytes.len()].copy_from_slice(bytes);
        return Value::Int(i64::from_le_bytes(buffer));
    }
    // Beyond 64 bits: no address or size is; kept as an approximate float.
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let magnitude = bytes.iter().rev().fold(0f64, |acc, b| {
        acc * 256.0 + f64::from(if negative { !b } else { *b })
    });
    Value::Float(if negative {
        -(magnitude + 1.0)
    } else {
        magnitude
    })
}
