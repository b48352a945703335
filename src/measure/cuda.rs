//! Which devices CUDA itself shows a case, asked of the CUDA driver
//! (`libcuda.so.1`) rather than inferred from `CUDA_VISIBLE_DEVICES`:
//! CUDA numbers devices fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`,
//! and only it knows that order, or how it reads a MIG GPU named by index.
//!
//! CUDA reads the variables once, at `cuInit`, for the life of a process,
//! so each question is a child: `oomgate __cuda-devices` with the case's
//! `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`, which loads libcuda,
//! calls `cuInit`, and prints each device's UUID (`cuDeviceGetUuid_v2`,
//! which gives a MIG instance's own) — as nvitop does. No context is
//! created, so no GPU memory is used. Answers are kept per pair of values
//! for the run. Without libcuda (a machine with NVML but no CUDA driver
//! library), or with `OOMGATE_LIBCUDA=none` (the tests, on the fake NVML
//! driver, whose devices a real libcuda would not know), the question has
//! no answer and the rules of `visible` decide alone.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::io::Read;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The hidden subcommand that asks libcuda.
pub const ARG: &str = "__cuda-devices";
const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NO_DEVICE: c_int = 100;
/// The longest a child may take (a driver's first `cuInit` can take
/// seconds on a large machine).
const LIMIT: Duration = Duration::from_secs(30);

/// In the child: one line per device CUDA shows, its UUID's 32 hex
/// digits; nothing when it shows none. Exit 0, or 3 with the reason.
pub fn main() -> i32 {
    match ask_libcuda() {
        Ok(uuids) => {
            for uuid in uuids {
                println!("{uuid}");
            }
            0
        }
        Err(why) => {
            eprintln!("{why}");
            3
        }
    }
}

fn ask_libcuda() -> Result<Vec<String>, String> {
    let name = library();
    // SAFETY: loading the CUDA driver library runs its initialisers, which
    // is what every CUDA program does; this process does nothing else.
    let lib = unsafe { libloading::Library::new(&name) }
        .map_err(|e| format!("{name} could not be loaded: {e}"))?;
    // SAFETY: the CUDA driver API's C signatures (cuda.h): CUresult is an
    // int, CUdevice an int, CUuuid 16 bytes.
    unsafe {
        let init: libloading::Symbol<unsafe extern "C" fn(c_uint) -> c_int> =
            lib.get(b"cuInit\0").map_err(|e| e.to_string())?;
        let count: libloading::Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
            lib.get(b"cuDeviceGetCount\0").map_err(|e| e.to_string())?;
        let get: libloading::Symbol<unsafe extern "C" fn(*mut c_int, c_int) -> c_int> =
            lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let uuid: libloading::Symbol<unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int> = lib
            .get(b"cuDeviceGetUuid_v2\0")
            .or_else(|_| lib.get(b"cuDeviceGetUuid\0"))
            .map_err(|e| e.to_string())?;
        match init(0) {
            CUDA_SUCCESS => {}
            // Every device hidden (`CUDA_VISIBLE_DEVICES=-1`, or empty).
            CUDA_ERROR_NO_DEVICE => return Ok(Vec::new()),
            code => return Err(format!("cuInit failed (CUresult {code})")),
        }
        let mut devices: c_int = 0;
        if count(&mut devices) != CUDA_SUCCESS {
            return Err("cuDeviceGetCount failed".into());
        }
        let mut uuids = Vec::new();
        for ordinal in 0..devices {
            let mut device: c_int = 0;
            let mut bytes = [0u8; 16];
            if get(&mut device, ordinal) != CUDA_SUCCESS || uuid(&mut bytes, device) != CUDA_SUCCESS
            {
                return Err(format!("CUDA device {ordinal} has no UUID"));
            }
            uuids.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
        }
        Ok(uuids)
    }
}

/// The CUDA driver library to ask: `$OOMGATE_LIBCUDA` (a path, or `none`
/// not to ask), else `libcuda.so.1` from the loader path.
fn library() -> String {
    std::env::var("OOMGATE_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".to_string())
}

/// A UUID as NVML prints it (`GPU-…`, `MIG-…`), reduced to its hex
/// digits, to compare with what CUDA gives.
pub fn hex_of(uuid: &str) -> String {
    uuid.split_once('-')
        .map_or(uuid, |(_, rest)| rest)
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

type Answer = Result<Vec<String>, String>;
/// `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`, as a question's key.
type Question = (Option<String>, Option<String>);

/// The devices CUDA shows a process with these variables, as UUID hex
/// digits in CUDA's numbering, or why libcuda could not be asked.
pub fn devices(visible: Option<&str>, order: Option<&str>) -> Answer {
    static ANSWERS: OnceLock<Mutex<HashMap<Question, Answer>>> = OnceLock::new();
    let key = (visible.map(str::to_string), order.map(str::to_string));
    let answers = ANSWERS.get_or_init(Mutex::default);
    if let Some(known) = answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return known.clone();
    }
    let answer = ask_child(visible, order);
    answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, answer.clone());
    answer
}

fn ask_child(visible: Option<&str>, order: Option<&str>) -> Answer {
    if library() == "none" {
        return Err("OOMGATE_LIBCUDA=none: CUDA is not asked".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("oomgate's own path: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg(ARG)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in [
        ("CUDA_VISIBLE_DEVICES", visible),
        ("CUDA_DEVICE_ORDER", order),
    ] {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let mut child = command.spawn().map_err(|e| format!("{ARG}: {e}"))?;
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                child.kill().ok();
                child.wait().ok();
                return Err(format!(
                    "libcuda did not answer within {}s",
                    LIMIT.as_secs()
                ));
            }
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).ok();
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).ok();
    }
    if !status.success() {
        return Err(stderr.trim().to_string());
    }
    Ok(stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.len() == 32 && l.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_compare_by_their_hex_digits() {
        assert_eq!(
            hex_of("GPU-00000000-1111-2222-3333-44444444444A"),
            "0000000011112222333344444444444a"
        );
        assert_eq!(
            hex_of("MIG-aaaaaaaa-0000-0000-0000-000000000000"),
            "aaaaaaaa000000000000000000000000"
        );
    }
}
