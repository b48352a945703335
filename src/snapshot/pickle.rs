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
//! complete (put in a list, dict or tuple) — a stack frame (`{filename,
//! line, name}`), interned, and a trace event (`{action, addr, size,
//! stream, frames}`) — in the memo too,
//! so oomgate's memory while reading stays a fraction of the file's size
//! (docs/performance.md). `keep_events: false` drops the events as they
//! are read (files over 1 GiB are summarised from `segments` alone).
//!
//! Bounded, whatever the file holds: every opcode costs O(1) amortised
//! time; the memory the values take is counted as they are made (lists,
//! dicts and tuples as they are made and freed, the stack, the marks, the
//! memo, interned strings, frames, stacks and events) and the read stops
//! past [`Limits::memory`]; the memo is dense where the pickle numbers its
//! slots in turn (as Python's pickler does) and sparse elsewhere, so a
//! slot number costs nothing; a list or dict is nested at most
//! `MAX_DEPTH` deep, and once it is put inside another it can no longer
//! change, so no value contains itself; nothing walks the values
//! recursively, dropping them included. Past `Limits::deadline` the
//! read stops.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::rc::Rc;
use std::time::Instant;

/// How deep lists, dicts and tuples may nest: a snapshot's are 6 deep.
pub const MAX_DEPTH: u16 = 100;
/// A dict of more items than this is not a frame or an event: it is never
/// made compact (which looks its keys up).
const COMPACT_ITEMS: usize = 2 * 16;
/// The longest string accepted (a frame's name, a settings value).
const MAX_STRING: u64 = 64 * 1024 * 1024;
/// How many opcodes are read between two looks at the clock.
const CLOCK_EVERY: u64 = 4096;

/// What a read may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The bytes its values may hold at once.
    pub memory: usize,
    /// When it stops.
    pub deadline: Option<Instant>,
    /// The bytes there are to read (the file's size), if known: a string
    /// longer than what is left is cut short, without being allocated.
    pub size: Option<u64>,
}

impl Limits {
    /// No bound: for tests of the pickles themselves.
    #[cfg(test)]
    pub fn none() -> Self {
        Limits {
            memory: usize::MAX,
            deadline: None,
            size: None,
        }
    }
}

// Bytes counted for each thing held (the allocation, rounded up).
const VALUE_BYTES: usize = std::mem::size_of::<Value>();
const CONTAINER_BYTES: usize = 64;
const TUPLE_BYTES: usize = 48;
const STRING_BYTES: usize = 64;
const FRAME_BYTES: usize = 96;
const STACK_BYTES: usize = 128;
const EVENT_BYTES: usize = 64;
const SPARSE_SLOT_BYTES: usize = 32;

thread_local! {
    /// The bytes the lists, dicts and tuples alive on this thread hold:
    /// counted where one is made or grows, and where it is freed.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn charge(bytes: usize) {
    HELD.with(|held| held.set(held.get().saturating_add_unsigned(bytes)));
}

fn refund(bytes: usize) {
    HELD.with(|held| held.set(held.get().saturating_sub_unsigned(bytes)));
}

fn held_now() -> isize {
    HELD.with(Cell::get)
}

/// A value of the pickle.
#[derive(Clone)]
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
    Tuple(Rc<Tuple>),
    Dict(Rc<Container>),
    Frame(Rc<Frame>),
    /// A list of frames, interned.
    Frames(Stack),
    Event(Rc<Event>),
}

/// Shallow: a container's items are counted, never walked.
impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::None => write!(f, "None"),
            Value::Bool(b) => write!(f, "Bool({b})"),
            Value::Int(n) => write!(f, "Int({n})"),
            Value::Float(x) => write!(f, "Float({x})"),
            Value::Str(s) => write!(f, "Str({s:?})"),
            Value::Bytes => write!(f, "Bytes"),
            Value::List(c) => write!(f, "List({} items)", c.items.borrow().len()),
            Value::Tuple(t) => write!(f, "Tuple({} items)", t.items.len()),
            Value::Dict(c) => write!(f, "Dict({} items)", c.items.borrow().len() / 2),
            Value::Frame(frame) => write!(f, "{frame:?}"),
            Value::Frames(stack) => write!(f, "Frames({} frames)", stack.len()),
            Value::Event(event) => write!(f, "{event:?}"),
        }
    }
}

impl Value {
    /// How deep the lists, dicts and tuples in it nest (0 for a number).
    fn depth(&self) -> u16 {
        match self {
            Value::List(c) | Value::Dict(c) => c.depth.get(),
            Value::Tuple(t) => t.depth,
            Value::Frame(_) | Value::Frames(_) | Value::Event(_) => 1,
            _ => 0,
        }
    }
}

/// A stack of frames, innermost first, interned.
pub type Stack = Rc<Vec<Rc<Frame>>>;

/// A list or dict while it is read, and after: its items (a dict's as
/// key, value pairs in turn), and the memo slot it was put in, so that it
/// can be replaced there when it is made compact.
pub struct Container {
    pub items: RefCell<Vec<Value>>,
    /// The first memo slot it was put in; `NO_SLOT` for none.
    memo: Cell<u32>,
    depth: Cell<u16>,
    /// Put inside another list, dict or tuple: it no longer changes.
    frozen: Cell<bool>,
    /// Its frames, once asked for (it is frozen by then).
    stack: OnceCell<Stack>,
}

const NO_SLOT: u32 = u32::MAX;

impl Container {
    fn new(items: Vec<Value>, depth: u16) -> Rc<Container> {
        charge(CONTAINER_BYTES + items.capacity() * VALUE_BYTES);
        Rc::new(Container {
            items: RefCell::new(items),
            memo: Cell::new(NO_SLOT),
            depth: Cell::new(depth),
            frozen: Cell::new(false),
            stack: OnceCell::new(),
        })
    }

    /// A list's frames (anything else in it left out), made once.
    pub fn stack(&self) -> Stack {
        self.stack
            .get_or_init(|| {
                Rc::new(
                    self.items
                        .borrow()
                        .iter()
                        .filter_map(|v| match v {
                            Value::Frame(f) => Some(f.clone()),
                            _ => None,
                        })
                        .collect(),
                )
            })
            .clone()
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

impl std::fmt::Debug for Container {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Container({} items)", self.items.borrow().len())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let items = std::mem::take(self.items.get_mut());
        refund(CONTAINER_BYTES + items.capacity() * VALUE_BYTES);
        drop_all(items);
    }
}

/// A tuple: made whole, never changed.
pub struct Tuple {
    items: Vec<Value>,
    depth: u16,
}

impl Tuple {
    fn new(items: Vec<Value>, depth: u16) -> Rc<Tuple> {
        charge(TUPLE_BYTES + items.capacity() * VALUE_BYTES);
        Rc::new(Tuple { items, depth })
    }

    pub fn items(&self) -> &[Value] {
        &self.items
    }
}

impl std::fmt::Debug for Tuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tuple({} items)", self.items.len())
    }
}

impl Drop for Tuple {
    fn drop(&mut self) {
        let items = std::mem::take(&mut self.items);
        refund(TUPLE_BYTES + items.capacity() * VALUE_BYTES);
        drop_all(items);
    }
}

/// Values dropped without recursion: a list, dict or tuple whose last
/// holder this is gives its items to the same loop, so a chain of any
/// depth is freed in constant stack.
fn drop_all(mut pending: Vec<Value>) {
    while let Some(value) = pending.pop() {
        match value {
            Value::List(c) | Value::Dict(c) => {
                if let Some(mut c) = Rc::into_inner(c) {
                    pending.append(c.items.get_mut());
                }
            }
            Value::Tuple(t) => {
                if let Some(mut t) = Rc::into_inner(t) {
                    pending.append(&mut t.items);
                }
            }
            _ => {}
        }
    }
}

/// One frame of a stack: `{filename, line, name}`.
#[derive(Debug, PartialEq, Eq)]
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
    /// A bound of `Limits` or `MAX_DEPTH` reached.
    #[error("{0}")]
    Bound(String),
    /// `Limits::deadline` passed.
    #[error("its deadline passed")]
    Late,
}

/// Read one pickle from `input`, within `limits`.
pub fn read(input: impl Read, keep_events: bool, limits: Limits) -> Result<Value, PickleError> {
    Machine::new(input, keep_events, limits).run()
}

/// [`read`], and the work it did: one for each opcode, each byte read
/// into a string and each value an opcode moved, copied or looked at.
#[cfg(test)]
pub fn read_counting(
    input: impl Read,
    keep_events: bool,
    limits: Limits,
) -> (Result<Value, PickleError>, u64) {
    let mut machine = Machine::new(input, keep_events, limits);
    let value = machine.run_here();
    (value, machine.work)
}

/// The memo: dense while slots are numbered in turn (as Python's pickler
/// numbers them), a map for any other slot, so that its size follows the
/// opcodes that filled it, never the numbers they name.
#[derive(Default)]
struct Memo {
    dense: Vec<Value>,
    sparse: HashMap<u32, Value>,
}

impl Memo {
    fn get(&self, slot: u32) -> Option<&Value> {
        match self.dense.get(slot as usize) {
            Some(value) => Some(value),
            None => self.sparse.get(&slot),
        }
    }

    fn set(&mut self, slot: u32, value: Value) {
        let at = slot as usize;
        if at < self.dense.len() {
            self.dense[at] = value;
        } else if at == self.dense.len() {
            self.dense.push(value);
        } else {
            self.sparse.insert(slot, value);
        }
    }

    /// The slot `MEMOIZE` fills: the memo's size.
    fn next(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    /// The bytes that setting `slot` may add (a vector or map grown).
    fn growth(&self, slot: u32) -> usize {
        let at = slot as usize;
        if at < self.dense.len() {
            0
        } else if at == self.dense.len() {
            if self.dense.len() == self.dense.capacity() {
                self.dense.capacity().max(4) * 2 * VALUE_BYTES
            } else {
                0
            }
        } else if self.sparse.len() == self.sparse.capacity() {
            self.sparse.capacity().max(4) * 2 * SPARSE_SLOT_BYTES
        } else {
            0
        }
    }

    fn bytes(&self) -> usize {
        self.dense.capacity() * VALUE_BYTES + self.sparse.capacity() * SPARSE_SLOT_BYTES
    }
}

/// A frame's identity: its strings are interned, so their addresses
/// stand for their text.
type FrameKey = (*const u8, i64, *const u8);

struct Machine<R> {
    input: R,
    at: u64,
    limits: Limits,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Memo,
    strings: HashSet<Rc<str>>,
    frames: HashMap<FrameKey, Rc<Frame>>,
    stacks: HashMap<Vec<*const Frame>, Stack>,
    keep_events: bool,
    /// The bytes held by interned strings, frames, stacks and the events:
    /// kept to the end of the read.
    interned: usize,
    /// `HELD` when the read began.
    held_before: isize,
    opcodes: u64,
    /// See [`read_counting`].
    work: u64,
}

impl<R: Read> Machine<R> {
    fn new(input: R, keep_events: bool, limits: Limits) -> Self {
        Machine {
            input,
            at: 0,
            limits,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            strings: HashSet::new(),
            frames: HashMap::new(),
            stacks: HashMap::new(),
            keep_events,
            interned: 0,
            held_before: held_now(),
            opcodes: 0,
            work: 0,
        }
    }

    fn damaged(&self, why: impl Into<String>) -> PickleError {
        PickleError::Damaged {
            at: self.at,
            why: why.into(),
        }
    }

    /// The bytes the read holds now.
    fn held(&self) -> usize {
        let containers = usize::try_from(held_now().saturating_sub(self.held_before)).unwrap_or(0);
        self.interned
            .saturating_add(containers)
            .saturating_add(self.stack.capacity() * VALUE_BYTES)
            .saturating_add(self.marks.capacity() * std::mem::size_of::<usize>())
            .saturating_add(self.memo.bytes())
    }

    /// Whether `extra` more bytes stay within the memory limit.
    fn room(&self, extra: usize) -> Result<(), PickleError> {
        if self.held().saturating_add(extra) > self.limits.memory {
            return Err(PickleError::Bound(format!(
                "reading it would take more than {} of memory",
                crate::units::Bytes(self.limits.memory as u64)
            )));
        }
        Ok(())
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
        if self
            .limits
            .size
            .is_some_and(|size| len > size.saturating_sub(self.at))
        {
            return Err(PickleError::Truncated);
        }
        self.room(len as usize)?;
        self.work += len;
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
        self.work += len;
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
        if let Some(found) = self.strings.get(text) {
            return found.clone();
        }
        let rc: Rc<str> = Rc::from(text);
        self.interned += text.len() + STRING_BYTES;
        self.strings.insert(rc.clone());
        rc
    }

    fn push(&mut self, value: Value) -> Result<(), PickleError> {
        if self.stack.len() == self.stack.capacity() {
            self.room(self.stack.capacity().max(4) * 2 * VALUE_BYTES)?;
        }
        self.stack.push(value);
        Ok(())
    }

    fn mark(&mut self) -> Result<(), PickleError> {
        if self.marks.len() == self.marks.capacity() {
            self.room(self.marks.capacity().max(4) * 2 * std::mem::size_of::<usize>())?;
        }
        self.marks.push(self.stack.len());
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
        self.work += (self.stack.len() - mark) as u64;
        Ok(self.stack.split_off(mark))
    }

    fn memoize(&mut self, slot: usize) -> Result<(), PickleError> {
        let slot = u32::try_from(slot).map_err(|_| self.damaged(format!("memo slot {slot}")))?;
        let value = self.top()?.clone();
        if let Value::List(c) | Value::Dict(c) = &value {
            if c.memo.get() == NO_SLOT {
                c.memo.set(slot);
            }
        }
        self.room(self.memo.growth(slot))?;
        self.memo.set(slot, value);
        Ok(())
    }

    fn recall(&mut self, slot: u32) -> Result<(), PickleError> {
        let value = self
            .memo
            .get(slot)
            .cloned()
            .ok_or_else(|| self.damaged(format!("memo slot {slot} was never set")))?;
        self.push(value)
    }

    /// `items` put inside a list, dict or tuple (`into`, if it exists
    /// already): the lists and dicts among them frozen, as they are
    /// complete, and the frames and events among them made compact; the
    /// depth the container then has.
    fn adopt(
        &mut self,
        into: Option<&Rc<Container>>,
        items: &mut [Value],
    ) -> Result<u16, PickleError> {
        self.work += items.len() as u64;
        let mut depth = 1;
        for item in items {
            if let Value::List(c) | Value::Dict(c) = &*item {
                if into.is_some_and(|into| Rc::ptr_eq(into, c)) {
                    return Err(self.damaged("a list or dict put inside itself"));
                }
                c.frozen.set(true);
            }
            if let Value::Dict(c) = &*item {
                let c = c.clone();
                let len = c.items.borrow().len();
                if len <= COMPACT_ITEMS {
                    // Up to six keys looked up.
                    self.work += 6 * len as u64;
                    if let Some(compact) = self.compact(&c) {
                        self.replace_in_memo(&c, compact.clone());
                        *item = compact;
                    }
                }
            }
            depth = depth.max(item.depth().saturating_add(1));
        }
        if depth > MAX_DEPTH {
            return Err(PickleError::Bound(format!(
                "its lists, dicts and tuples nest more than {MAX_DEPTH} deep"
            )));
        }
        Ok(depth)
    }

    /// Add `items` to the list or dict now on top of the stack.
    fn extend_top(&mut self, mut items: Vec<Value>, dict: bool) -> Result<(), PickleError> {
        if dict && items.len() % 2 != 0 {
            return Err(self.damaged("a dict item without its value"));
        }
        let container = match (self.top()?, dict) {
            (Value::Dict(c), true) | (Value::List(c), false) => c.clone(),
            _ => return Err(self.damaged("items added to what is not a container")),
        };
        // A pickle of plain data (Python's pickler) fills a list or dict
        // before it puts it anywhere: one that changes after would make
        // depths unknowable and cycles possible.
        if container.frozen.get() {
            return Err(self.damaged("items added to a list or dict already inside another"));
        }
        let depth = self.adopt(Some(&container), &mut items)?;
        container.depth.set(container.depth.get().max(depth));
        let mut list = container.items.borrow_mut();
        let before = list.capacity();
        let needed = list.len().saturating_add(items.len());
        if needed > before {
            self.room(before.saturating_mul(2).max(needed) * VALUE_BYTES)?;
        }
        list.extend(items);
        charge((list.capacity() - before) * VALUE_BYTES);
        Ok(())
    }

    /// The dict on top of the stack, made compact if it is a frame or an
    /// event.
    fn compact_top(&mut self) -> Result<(), PickleError> {
        let Value::Dict(c) = self.top()? else {
            return Ok(());
        };
        let c = c.clone();
        let len = c.items.borrow().len();
        if len > COMPACT_ITEMS {
            return Ok(());
        }
        self.work += 6 * len as u64;
        if let Some(compact) = self.compact(&c) {
            self.replace_in_memo(&c, compact.clone());
            let last = self.stack.len() - 1;
            self.stack[last] = compact;
        }
        Ok(())
    }

    /// `container`, where the memo slot it was first put in still holds
    /// it, replaced there by `with`.
    fn replace_in_memo(&mut self, container: &Rc<Container>, with: Value) {
        let slot = container.memo.get();
        let same = matches!(
            self.memo.get(slot),
            Some(Value::List(c) | Value::Dict(c)) if Rc::ptr_eq(c, container)
        );
        if same {
            self.memo.set(slot, with);
        }
    }

    /// A frame or a trace event, made compact; `None` for any other dict.
    fn compact(&mut self, dict: &Container) -> Option<Value> {
        if let (Some(Value::Str(filename)), Some(Value::Int(line)), Some(Value::Str(name))) =
            (dict.get("filename"), dict.get("line"), dict.get("name"))
        {
            let key = (filename.as_ptr(), line, name.as_ptr());
            if let Some(found) = self.frames.get(&key) {
                return Some(Value::Frame(found.clone()));
            }
            let frame = Rc::new(Frame {
                filename,
                line,
                name,
            });
            self.interned += FRAME_BYTES;
            self.frames.insert(key, frame.clone());
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
                self.replace_in_memo(&list, Value::Frames(frames.clone()));
                frames
            }
            Some(Value::Frames(frames)) => frames,
            _ => self.stack_of_nothing(),
        };
        self.interned += EVENT_BYTES;
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

    /// A list of frames, interned: the same stack is held once, and a
    /// list's is looked up once however often it is referred to.
    fn stack_of(&mut self, list: &Container) -> Stack {
        if let Some(found) = list.stack.get() {
            return found.clone();
        }
        self.work += list.items.borrow().len() as u64;
        let frames: Vec<Rc<Frame>> = list
            .items
            .borrow()
            .iter()
            .filter_map(|v| match v {
                Value::Frame(f) => Some(f.clone()),
                _ => None,
            })
            .collect();
        let interned = self.intern_stack(frames);
        let _ = list.stack.set(interned.clone());
        interned
    }

    fn stack_of_nothing(&mut self) -> Stack {
        self.intern_stack(Vec::new())
    }

    fn intern_stack(&mut self, frames: Vec<Rc<Frame>>) -> Stack {
        let key: Vec<*const Frame> = frames.iter().map(Rc::as_ptr).collect();
        if let Some(found) = self.stacks.get(&key) {
            return found.clone();
        }
        self.interned += STACK_BYTES + 2 * frames.len() * std::mem::size_of::<usize>();
        let interned: Stack = Rc::new(frames);
        self.stacks.insert(key, interned.clone());
        interned
    }

    fn run(mut self) -> Result<Value, PickleError> {
        self.run_here()
    }

    fn run_here(&mut self) -> Result<Value, PickleError> {
        let first = self.byte()?;
        if first != 0x80 {
            return Err(PickleError::NotBinary(first));
        }
        let protocol = self.byte()?;
        if !(2..=5).contains(&protocol) {
            return Err(self.damaged(format!("protocol {protocol}")));
        }
        loop {
            if self.opcodes % CLOCK_EVERY == 0
                && self.limits.deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Err(PickleError::Late);
            }
            self.opcodes += 1;
            self.work += 1;
            if let Some(value) = self.step()? {
                return Ok(value);
            }
            // What an opcode allocates without asking `room` first is
            // bounded (a frame, an event, an interned stack or string).
            self.room(0)?;
        }
    }

    /// One opcode; the value read at STOP.
    fn step(&mut self) -> Result<Option<Value>, PickleError> {
        let at = self.at;
        let opcode = self.byte()?;
        let unsupported = |what| PickleError::Unsupported { opcode, at, what };
        match opcode {
            b'.' => return self.pop().map(Some),
            0x95 => {
                // FRAME: a length hint only.
                self.u64()?;
            }
            0x80 => {
                self.byte()?;
            }
            b'}' => self.push(Value::Dict(Container::new(Vec::new(), 1)))?,
            b']' | 0x8f => self.push(Value::List(Container::new(Vec::new(), 1)))?,
            b')' => self.push(Value::Tuple(Tuple::new(Vec::new(), 1)))?,
            b'(' => self.mark()?,
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_top(vec![key, value], true)?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                self.extend_top(items, true)?;
                // Python's pickler writes a dict of 2 to 1,000 items with
                // one SETITEMS: a small one is complete here, and made
                // compact at once (freed while the allocator's caches are
                // warm); one filled by SETITEM is made compact where it
                // is put.
                self.compact_top()?;
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
                let mut items = self.pop_mark()?;
                let depth = self.adopt(None, &mut items)?;
                self.push(Value::List(Container::new(items, depth)))?;
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
                let mut items = self.pop_mark()?;
                let depth = self.adopt(None, &mut items)?;
                self.push(Value::Tuple(Tuple::new(items, depth)))?;
            }
            0x85..=0x87 => {
                let n = usize::from(opcode - 0x84);
                if self.stack.len() < n {
                    return Err(self.damaged("a tuple of more items than the stack holds"));
                }
                let mut items = self.stack.split_off(self.stack.len() - n);
                let depth = self.adopt(None, &mut items)?;
                self.push(Value::Tuple(Tuple::new(items, depth)))?;
            }
            0x94 => self.memoize(self.memo.next())?,
            b'q' => {
                let slot = usize::from(self.byte()?);
                self.memoize(slot)?;
            }
            b'r' => {
                let slot = self.u32()? as usize;
                self.memoize(slot)?;
            }
            b'h' => {
                let slot = u32::from(self.byte()?);
                self.recall(slot)?;
            }
            b'j' => {
                let slot = self.u32()?;
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
        Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of a million lists (deeper than any read makes), and one of
    /// tuples, freed on a thread of 256 KiB of stack: a recursive drop
    /// would overflow it.
    #[test]
    fn a_deep_chain_is_freed_in_constant_stack() {
        let freed = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let before = held_now();
                let mut list = Value::List(Container::new(Vec::new(), 1));
                let mut tuple = Value::Tuple(Tuple::new(Vec::new(), 1));
                for _ in 0..1_000_000 {
                    list = Value::List(Container::new(vec![list], 1));
                    tuple = Value::Tuple(Tuple::new(vec![tuple, Value::None], 1));
                }
                let mut dict = Container::new(vec![Value::None, list], 1);
                dict = Container::new(vec![tuple, Value::Dict(dict)], 1);
                assert!(held_now() - before > 100 << 20, "counted as made");
                drop(dict);
                held_now() - before
            })
            .expect("thread")
            .join()
            .expect("freed without overflowing its stack");
        assert_eq!(freed, 0, "every byte counted is given back");
    }
}
