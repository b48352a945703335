use super::*;

#[test]
fn kib_fields() {
    let rollup = b"00400000-7ffd [rollup]\nRss:   2048 kB\nPss:   1536 kB\nPss_Anon:  1000 kB\n";
    assert_eq!(kib_field(rollup, "Pss:"), Some(1536 * 1024));
    let status = b"Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t   300 kB\nVmRSS:\t 100 kB\n";
    assert_eq!(kib_field(status, "VmHWM:"), Some(300 * 1024));
    assert_eq!(kib_field(b"Name: x\n", "VmHWM:"), None);
    assert_eq!(kib_field(b"VmHWM: lots kB\n", "VmHWM:"), None);
}

#[test]
fn the_largest_floor_is_the_peak_and_names_itself() {
    let mut meter = HostMeter::new(None, None);
    assert_eq!(meter.peak(), None);
    meter.raise(HostFloor::PssSum, 200, 10);
    meter.raise(HostFloor::Vmhwm, 150, 20);
    meter.record_rusage(300, Duration::from_millis(30));
    meter.record_rusage(0, Duration::from_millis(40)); // nothing learnt
    let (peak, floor) = meter.peak().expect("a peak");
    assert_eq!(
        (peak.bytes, peak.t_ms, floor),
        (300, 30, HostFloor::RusageMaxrss)
    );
    // A tie keeps the first floor in order, at its own time.
    meter.raise(HostFloor::PssSum, 300, 50);
    assert_eq!(meter.peak().map(|(_, f)| f), Some(HostFloor::PssSum));
    let figures = meter.finish(Duration::from_millis(60));
    assert_eq!(figures.method, HostMethod::ProcfsPss);
    assert_eq!(figures.floors.cgroup_anon_shmem_bytes, None);
    assert_eq!(figures.floors.rusage_maxrss_bytes, Some(300));
    assert_eq!(figures.oom_kills, None, "unknown without a cgroup, not 0");
}

#[test]
fn sweeps_are_paced_by_their_cost() {
    let ms = Duration::from_millis;
    // Cheap sweeps: every tick without a cgroup, two a second with one.
    assert_eq!(Pace::WITHOUT_CGROUP.gap(Duration::from_micros(100)), ms(20));
    assert_eq!(Pace::WITH_CGROUP.gap(Duration::from_micros(100)), ms(500));
    // A 20 ms sweep (200 processes): 0.5 % / 0.1 % of a core.
    assert_eq!(Pace::WITHOUT_CGROUP.gap(ms(20)), ms(4000));
    assert_eq!(Pace::WITH_CGROUP.gap(ms(20)), ms(20_000));
    // However costly, at least every 30 s.
    assert_eq!(Pace::WITH_CGROUP.gap(ms(5000)), Duration::from_secs(30));
}

#[test]
fn a_new_high_of_a_cheap_figure_asks_for_a_sweep_at_its_top_within_its_share() {
    let mib = |n: u64| n * 1024 * 1024;
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut steer = Steer::default();
    steer.note(Some(mib(100)), 1, at(0));
    assert!(
        !steer.asks(at(0)),
        "the first reading is a new high, but climbing: the case just started"
    );
    steer.note(Some(mib(100)), 1, at(20));
    assert!(steer.asks(at(20)), "the first high, once it stops rising");
    steer.swept(Some(mib(100)), 1, Duration::from_millis(4));
    // A climb asks for a sweep at its top, not on the way.
    steer.note(Some(mib(300)), 1, at(20));
    assert!(!steer.asks(at(20)), "still rising");
    steer.note(Some(mib(400)), 1, at(40));
    assert!(!steer.asks(at(40)), "still rising");
    steer.note(Some(mib(401)), 1, at(60));
    assert!(steer.asks(at(60)), "at the top, within the burst");
    steer.swept(Some(mib(401)), 1, Duration::from_millis(4));
    // Noise within 1 % of the swept level, or a fall, asks nothing.
    steer.note(Some(mib(403)), 1, at(80));
    steer.note(Some(mib(300)), 1, at(100));
    assert!(!steer.asks(at(10_000)));
    // A rise back to a level already swept is no new high either.
    steer.swept(Some(mib(300)), 1, Duration::ZERO);
    steer.note(Some(mib(350)), 1, at(120));
    steer.note(Some(mib(350)), 1, at(140));
    assert!(!steer.asks(at(10_000)));
    // A new process (a spawned worker) asks, whatever the memory.
    steer.note(Some(mib(350)), 3, at(160));
    assert!(steer.asks(at(160)));
    // Costly sweeps wait until the total is back within 2 % of a core
    // since the first tick, beyond the 50 ms burst: 400 ms spent asks
    // again at 17.5 s.
    steer.swept(Some(mib(350)), 3, Duration::from_millis(392));
    steer.note(Some(mib(500)), 3, at(180));
    steer.note(Some(mib(500)), 3, at(200));
    assert!(!steer.asks(at(17_499)));
    assert!(steer.asks(at(17_500)));
    // Without a cgroup, the process count alone steers.
    let mut procfs = Steer::default();
    procfs.note(None, 1, at(0));
    procfs.swept(None, 1, Duration::ZERO);
    procfs.note(None, 1, at(20));
    assert!(!procfs.asks(at(1000)));
    procfs.note(None, 2, at(40));
    assert!(procfs.asks(at(40)));
}

#[test]
fn which_methods_compare() {
    use HostMethod::*;
    assert!(CgroupV1.comparable_with(CgroupV2));
    assert!(ProcfsPss.comparable_with(ProcfsPss));
    assert!(!CgroupV1.comparable_with(ProcfsPss));
    assert!(!ProcfsRss.comparable_with(CgroupV1));
    assert!(!Unknown.comparable_with(Unknown));
    let read: HostMethod = serde_json::from_str("\"cgroup-v9\"").expect("lenient");
    assert_eq!(read, Unknown);
}

#[test]
fn method_names_are_stable() {
    for (method, name) in [
        (HostMethod::CgroupV1, "cgroup-v1"),
        (HostMethod::CgroupV2, "cgroup-v2"),
        (HostMethod::ProcfsPss, "procfs-pss"),
        (HostMethod::ProcfsRss, "procfs-rss"),
    ] {
        assert_eq!(serde_json::to_value(method).ok(), Some(name.into()));
        assert_eq!(method.as_str(), name);
    }
    for floor in HostFloor::ALL {
        assert_eq!(
            serde_json::to_value(floor).ok(),
            Some(floor.as_str().into())
        );
    }
}
