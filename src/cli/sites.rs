//! `oomgate sites PATH`: the allocation sites of a run's cases (its
//! results.json) or of one torch memory snapshot (a `.pickle`).

use std::fmt::Write as _;

use super::args::SitesArgs;
use super::shared::{CliError, Outcome, write_stdout};
use crate::clean::line as clean;
use crate::snapshot::{AllocationSites, Site, SitesFrom};
use crate::units::Bytes;

/// How many of each rank's sites the text lists.
const RANK_SITES_SHOWN: usize = 3;

/// A rank's own sites: its number and its largest sites.
type RankSites = (u32, Vec<Site>);

/// `oomgate sites`.
pub fn sites(args: &SitesArgs) -> Result<Outcome, CliError> {
    let is_pickle = args.path.extension().is_some_and(|e| e == "pickle");
    let mut by_rank: std::collections::HashMap<String, Vec<RankSites>> = Default::default();
    let found: Vec<(String, AllocationSites)> = if is_pickle {
        let name = args.path.display().to_string();
        let cwd = std::env::current_dir().unwrap_or_default();
        let summary = crate::snapshot::read_file(
            &args.path,
            &name,
            args.depth.map_or(1, |d| d as usize),
            &cwd,
        )
        .map_err(|e| CliError::BadInput(e.to_string()))?;
        vec![(name, summary)]
    } else {
        let text = crate::files::read_input(
            &args.path,
            crate::files::MAX_RESULTS_BYTES,
            "a results file",
        )
        .map_err(|e| CliError::BadInput(format!("cannot read {}: {e}", args.path.display())))?;
        let results = crate::results::readback::parse(&text)
            .map_err(|why| CliError::BadInput(format!("{}: {why}", args.path.display())))?;
        if args.depth.is_some() {
            return Err(CliError::BadInput(
                "--depth applies to a .pickle; a results.json's sites were named with its cases' `sites.depth`".into(),
            ));
        }
        let mut found: Vec<(String, AllocationSites)> = results
            .cases
            .into_iter()
            .filter(|c| args.case.as_ref().is_none_or(|id| &c.id == id))
            .filter_map(|c| {
                let ranks: Vec<RankSites> = c
                    .ranks
                    .into_iter()
                    .filter(|r| !r.allocation_sites.is_empty())
                    .map(|r| (r.rank, r.allocation_sites))
                    .collect();
                if !ranks.is_empty() {
                    by_rank.insert(c.id.clone(), ranks);
                }
                Some((c.id, c.allocation_sites?))
            })
            .collect();
        if found.is_empty() {
            return Err(CliError::BadInput(match &args.case {
                Some(id) => format!(
                    "{}: case `{id}` is not there, or left no memory snapshot",
                    args.path.display()
                ),
                None => format!(
                    "{}: no case left a memory snapshot (OOMGATE_SNAPSHOT=exit, or the probe's record_memory(); docs/diagnosis.md#allocation-sites)",
                    args.path.display()
                ),
            }));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    };
    let text = if args.json {
        let map: indexmap::IndexMap<&str, &AllocationSites> =
            found.iter().map(|(id, s)| (id.as_str(), s)).collect();
        let text = serde_json::to_string_pretty(&map)
            .map_err(|e| CliError::Infrastructure(e.to_string()))?;
        // The same values, with what serde_json leaves raw in a string
        // (DEL, C1, bidi, noncharacters) as `\u` escapes.
        let mut text = crate::clean::json(&text).into_owned();
        text.push('\n');
        text
    } else {
        found
            .iter()
            .map(|(id, sites)| {
                let mut text = render(id, sites, args.top);
                text.push_str(&render_ranks(by_rank.get(id).map_or(&[], Vec::as_slice)));
                text
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    write_stdout(&text);
    Ok(Outcome::Passed)
}

/// Each rank's largest sites, a line each: `  rank 2: model.py:10 load
/// 400.0 MiB, model.py:88 attention 612.0 MiB`.
fn render_ranks(ranks: &[RankSites]) -> String {
    let mut out = String::new();
    if ranks.is_empty() {
        return out;
    }
    let _ = writeln!(out, "  by rank (each rank's own snapshot):");
    for (rank, sites) in ranks {
        let listed: Vec<String> = sites
            .iter()
            .take(RANK_SITES_SHOWN)
            .map(|s| format!("{} {}", clean(&s.site), Bytes(s.bytes)))
            .collect();
        let _ = writeln!(out, "    rank {rank}: {}", listed.join(", "));
    }
    out
}

/// One case's sites, as a person reads them. Every text in them came
/// from a snapshot or a results.json — frame names, file names, the
/// allocator's settings — and is [cleaned](crate::clean::line)
/// to one line: a newline or ESC in a frame's name is shown, never acted
/// on (`::error` at a line's start is a command to a CI runner).
pub fn render(id: &str, sites: &AllocationSites, top: usize) -> String {
    let mut out = String::new();
    let when = match (sites.from, sites.estimated) {
        (SitesFrom::Peak, false) => "at the peak",
        (SitesFrom::Peak, true) => "at the peak (estimated)",
        (SitesFrom::Dump, _) => "at the dump",
    };
    let _ = writeln!(
        out,
        "{}: {} allocated {when} on {} device(s); reserved {}, fragmentation {} at the dump{}",
        clean(id),
        Bytes(sites.allocated_bytes),
        sites.devices,
        Bytes(sites.reserved_bytes),
        Bytes(sites.fragmentation_bytes),
        match sites.files.as_slice() {
            [] => String::new(),
            files => format!(" ({})", clean(&files.join(", "))),
        }
    );
    let mut rows = vec![vec![
        "  SITE".to_string(),
        "BYTES".to_string(),
        "BLOCKS".to_string(),
    ]];
    for site in sites.sites.iter().take(top) {
        rows.push(vec![
            format!("  {}", clean(&site.site)),
            Bytes(site.bytes).to_string(),
            site.count.to_string(),
        ]);
    }
    if sites.sites.len() > top {
        let rest: u64 = sites.sites[top..].iter().map(|s| s.bytes).sum();
        rows.push(vec![
            format!("  ({} more sites)", sites.sites.len() - top),
            Bytes(rest).to_string(),
            String::new(),
        ]);
    }
    out.push_str(&super::inspect::table(&rows));
    if !sites.allocator_settings.is_empty() {
        let settings: Vec<String> = sites
            .allocator_settings
            .iter()
            .map(|(k, v)| format!("{}={}", clean(k), clean(v)))
            .collect();
        let _ = writeln!(out, "  allocator: {}", settings.join(", "));
    }
    for note in &sites.notes {
        let _ = writeln!(out, "  note: {}", clean(note));
    }
    out
}
