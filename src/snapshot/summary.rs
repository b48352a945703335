//! A snapshot summarised: the bytes live at each device's peak, grouped by
//! allocation site, and the allocator's totals.
//!
//! The peak comes from the device's trace (`device_traces`, what
//! `_record_memory_history` kept): it is replayed forward from the state
//! at its first entry — the blocks live at the dump that no entry
//! allocated, plus the blocks an entry frees that no entry allocated (the
//! ring buffer dropped their allocation) — adding each `alloc` and taking
//! away each `free_requested`, as `torch.cuda.memory_allocated()` counts.
//! Without a trace, the blocks live at the dump are the sites.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use super::pickle::{Action, Container, Event, Frame, Stack, Value};
use super::sites::{AllocationSites, Site, SitesFrom};

/// Where a block's site comes from when no frame of it is the user's.
const NOT_RECORDED: &str = "(no stack recorded)";
const NO_USER_FRAME: &str = "(no frame outside torch and Python)";
const BEFORE_TRACE: &str = "(allocated before the trace began)";

/// One block live at the dump.
struct Block {
    device: i64,
    addr: u64,
    size: u64,
    frames: Stack,
}

/// Summarise one snapshot's top-level dict. `depth`: user frames that
/// name a site; `cwd`: file names under it are shown relative to it.
pub fn summarise(
    root: &Value,
    depth: usize,
    cwd: &std::path::Path,
) -> Result<AllocationSites, String> {
    let Value::Dict(root) = root else {
        return Err("its top level is not a dict: not a torch memory snapshot".into());
    };
    let Some(Value::List(segments)) = root.get("segments") else {
        return Err("it has no `segments` list: not a torch memory snapshot".into());
    };
    let mut namer = Namer {
        depth: depth.max(1),
        cwd,
        named: HashMap::new(),
    };
    let nothing: Stack = Rc::new(Vec::new());
    let mut summary = AllocationSites::default();
    let mut blocks = Vec::new();
    let (mut allocated_at_dump, mut graph_pool) = (0u64, 0u64);
    for segment in segments.items.borrow().iter() {
        let Value::Dict(segment) = segment else {
            continue;
        };
        let total = segment.number("total_size").unwrap_or(0);
        summary.reserved_bytes = summary.reserved_bytes.saturating_add(total);
        // Pool (0, 0) is the default one; any other is a CUDA graph's
        // private pool (or a user's `MemPool`).
        if let Some(Value::Tuple(pool)) = segment.get("segment_pool_id") {
            if pool
                .items()
                .iter()
                .any(|v| matches!(v, Value::Int(n) if *n != 0))
            {
                graph_pool = graph_pool.saturating_add(total);
            }
        }
        let device = match segment.get("device") {
            Some(Value::Int(n)) => n,
            _ => 0,
        };
        let Some(Value::List(list)) = segment.get("blocks") else {
            continue;
        };
        for block in list.items.borrow().iter() {
            let Value::Dict(block) = block else { continue };
            let active =
                matches!(block.get("state"), Some(Value::Str(s)) if &*s == "active_allocated");
            if !active {
                continue;
            }
            let size = block.number("size").unwrap_or(0);
            allocated_at_dump = allocated_at_dump.saturating_add(size);
            blocks.push(Block {
                device,
                addr: block.number("address").unwrap_or(0),
                size,
                frames: frames_of(block.get("frames"), &nothing),
            });
        }
    }
    summary.fragmentation_bytes = summary.reserved_bytes.saturating_sub(allocated_at_dump);
    summary.graph_pool_bytes = graph_pool;
    if let Some(Value::Dict(settings)) = root.get("allocator_settings") {
        summary.allocator_settings = settings_of(&settings);
    }
    let traces: Vec<Vec<Rc<Event>>> = match root.get("device_traces") {
        Some(Value::List(devices)) => devices
            .items
            .borrow()
            .iter()
            .map(|trace| match trace {
                Value::List(events) => events
                    .items
                    .borrow()
                    .iter()
                    .filter_map(|e| match e {
                        Value::Event(e) => Some(e.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut sites: HashMap<Rc<str>, (u64, u64)> = HashMap::new();
    let mut add = |site: Rc<str>, bytes: u64| {
        let entry = sites.entry(site).or_default();
        entry.0 = entry.0.saturating_add(bytes);
        entry.1 += 1;
    };
    let traced = traces.iter().any(|t| !t.is_empty());
    summary.from = if traced {
        SitesFrom::Peak
    } else {
        SitesFrom::Dump
    };
    if !traced {
        summary.allocated_bytes = allocated_at_dump;
        for block in &blocks {
            add(namer.site(&block.frames), block.size);
        }
    }
    // Each device's blocks, grouped once: a device's replay sees its own.
    let mut by_device: BTreeMap<i64, Vec<&Block>> = BTreeMap::new();
    for block in &blocks {
        by_device.entry(block.device).or_default().push(block);
    }
    for device in (0..traces.len()).filter_map(|d| i64::try_from(d).ok()) {
        by_device.entry(device).or_default();
    }
    let devices = by_device.len();
    for (device, live) in by_device.iter().filter(|_| traced) {
        let events: &[Rc<Event>] = usize::try_from(*device)
            .ok()
            .and_then(|d| traces.get(d))
            .map_or(&[], Vec::as_slice);
        let peak = replay(events, live);
        summary.allocated_bytes = summary.allocated_bytes.saturating_add(peak.bytes);
        if peak.unmatched > 0 {
            summary.estimated = true;
        }
        for (frames, size) in peak.live {
            let site = match frames {
                Some(frames) => namer.site(frames),
                None => Rc::from(BEFORE_TRACE),
            };
            add(site, size);
        }
        if let Some(oom) = peak.oom {
            summary.notes.push(format!(
                "device {device}: the allocator ran out of memory asking for {}",
                crate::units::Bytes(oom)
            ));
        }
    }
    if summary.estimated {
        summary.notes.push(
            "the trace's ring buffer had dropped its start (frees of blocks it never saw allocated): the peak is estimated from the blocks live at the dump, and blocks allocated before the trace began have no site".into(),
        );
    }
    if graph_pool > 0 {
        summary.notes.push(format!(
            "{} is reserved by CUDA graph pools: allocations made while capturing a graph are not in the trace",
            crate::units::Bytes(graph_pool)
        ));
    }
    summary.devices = devices;
    let mut sites: Vec<Site> = sites
        .into_iter()
        .map(|(site, (bytes, count))| Site {
            site: site.to_string(),
            bytes,
            count,
        })
        .collect();
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    summary.sites = sites;
    Ok(summary)
}

/// A device's peak: its allocated bytes and the blocks live then (their
/// allocation's frames, or `None` for a block allocated before the trace).
struct Peak<'a> {
    bytes: u64,
    live: Vec<(Option<&'a Stack>, u64)>,
    /// Frees of blocks the trace never saw allocated.
    unmatched: usize,
    /// The size an `oom` entry asked for.
    oom: Option<u64>,
}

fn replay<'a>(events: &'a [Rc<Event>], live_at_dump: &[&'a Block]) -> Peak<'a> {
    // Pair each alloc with the free that ends it, by address.
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut freed_at: Vec<Option<usize>> = vec![None; events.len()];
    let mut unmatched: Vec<(usize, u64)> = Vec::new();
    let mut oom = None;
    for (i, event) in events.iter().enumerate() {
        match (event.action, event.addr) {
            (Action::Alloc, Some(addr)) => {
                if let Some(previous) = open.insert(addr, i) {
                    freed_at[previous] = Some(i);
                }
            }
            (Action::FreeRequested, Some(addr)) => match open.remove(&addr) {
                Some(alloc) => freed_at[alloc] = Some(i),
                None => unmatched.push((i, event.size)),
            },
            (Action::Oom, _) => oom = Some(event.size),
            _ => {}
        }
    }
    // Live at the first entry: the dump's blocks no entry allocated, and
    // the blocks freed without an allocation in view.
    let before: Vec<&&Block> = live_at_dump
        .iter()
        .filter(|b| !open.contains_key(&b.addr))
        .collect();
    let start: u64 = before
        .iter()
        .map(|b| b.size)
        .chain(unmatched.iter().map(|(_, size)| *size))
        .fold(0, u64::saturating_add);
    let (mut running, mut best, mut at) = (start, start, None);
    for (i, event) in events.iter().enumerate() {
        match event.action {
            Action::Alloc => running = running.saturating_add(event.size),
            Action::FreeRequested => running = running.saturating_sub(event.size),
            _ => continue,
        }
        if running > best {
            best = running;
            at = Some(i);
        }
    }
    let after = |end: Option<usize>| match (at, end) {
        (_, None) => true,
        (None, Some(_)) => true,
        (Some(peak), Some(end)) => end > peak,
    };
    let mut live: Vec<(Option<&Stack>, u64)> =
        before.iter().map(|b| (Some(&b.frames), b.size)).collect();
    live.extend(
        unmatched
            .iter()
            .filter(|(free, _)| after(Some(*free)))
            .map(|(_, size)| (None, *size)),
    );
    if let Some(peak) = at {
        for (i, event) in events.iter().enumerate().take(peak + 1) {
            if event.action == Action::Alloc && after(freed_at[i]) {
                live.push((Some(&event.frames), event.size));
            }
        }
    }
    Peak {
        bytes: best,
        live,
        unmatched: unmatched.len(),
        oom,
    }
}

/// Names sites from stacks: the first `depth` frames that are the user's.
/// Each stack is named once, however many blocks share it.
struct Namer<'a> {
    depth: usize,
    cwd: &'a std::path::Path,
    named: HashMap<*const Vec<Rc<Frame>>, Rc<str>>,
}

impl Namer<'_> {
    fn site(&mut self, frames: &Stack) -> Rc<str> {
        // The stacks outlive the namer (the snapshot's values hold them),
        // so an address names one stack.
        if let Some(name) = self.named.get(&Rc::as_ptr(frames)) {
            return name.clone();
        }
        let name: Rc<str> = Rc::from(self.name(frames));
        self.named.insert(Rc::as_ptr(frames), name.clone());
        name
    }

    fn name(&self, frames: &[Rc<Frame>]) -> String {
        if frames.is_empty() {
            return NOT_RECORDED.to_string();
        }
        let named: Vec<String> = frames
            .iter()
            .filter(|f| is_user_frame(f))
            .take(self.depth)
            .map(|f| format!("{}:{} {}", self.file(&f.filename), f.line, f.name))
            .collect();
        if named.is_empty() {
            NO_USER_FRAME.to_string()
        } else {
            named.join(" ← ")
        }
    }

    /// A file under the case's directory relative to it; an installed
    /// package's from the package on.
    fn file<'f>(&self, filename: &'f str) -> std::borrow::Cow<'f, str> {
        if let Ok(relative) = std::path::Path::new(filename).strip_prefix(self.cwd) {
            return relative.display().to_string().into();
        }
        match filename.rfind("-packages/") {
            Some(at) => filename[at + "-packages/".len()..].into(),
            None => filename.into(),
        }
    }
}

/// A frame of the user's code: not torch's, not the interpreter's or its
/// standard library's, not native code.
fn is_user_frame(frame: &Frame) -> bool {
    let file = &*frame.filename;
    let internal = file.is_empty()
        || file.starts_with('<')
        || file == "??"
        || [".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".cuh"]
            .iter()
            .any(|ext| file.ends_with(ext))
        || file.contains("/torch/")
        || file.starts_with("torch/")
        || is_stdlib(file);
    !internal
}

/// `/usr/lib/python3.11/contextlib.py`, not `.../python3.11/site-packages/x.py`.
fn is_stdlib(file: &str) -> bool {
    let Some(at) = file.find("/lib/python3") else {
        return false;
    };
    !file[at..].contains("-packages/")
}

fn frames_of(value: Option<Value>, nothing: &Stack) -> Stack {
    match value {
        Some(Value::Frames(frames)) => frames,
        Some(Value::List(list)) => list.stack(),
        _ => nothing.clone(),
    }
}

/// `allocator_settings` as text: `expandable_segments = "True"`.
fn settings_of(settings: &Container) -> BTreeMap<String, String> {
    let items = settings.items.borrow();
    items
        .chunks_exact(2)
        .filter_map(|pair| {
            let Value::Str(key) = &pair[0] else {
                return None;
            };
            let value = match &pair[1] {
                Value::None => "None".to_string(),
                Value::Bool(true) => "True".to_string(),
                Value::Bool(false) => "False".to_string(),
                Value::Int(n) => n.to_string(),
                Value::Float(f) => f.to_string(),
                Value::Str(s) => s.to_string(),
                _ => return None,
            };
            Some((key.to_string(), value))
        })
        .collect()
}
