//! `lhc bench import`: a full configuration import into the cache snapshot — the
//! `config.change` decoded and applied, the import validated and built (503/504), and the
//! commit that writes it into a fresh column family and switches to it — next to a raw
//! RocksDB WriteBatch of the same bytes.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use lhc_engine::event::EventKind;
use lhc_engine::Output;
use lhc_log::LogEntry;
use lhc_node::{Folder, Store, StoreOptions};

/// The configuration's size.
pub struct ImportBench {
    /// VDAs (over 4 zones).
    pub vdas: usize,
    /// Users.
    pub users: usize,
    /// Delivery groups.
    pub groups: usize,
}

/// The site configuration as one `config.change`, then a health check that names the
/// connector (its first sync check imports at once).
fn records(b: &ImportBench) -> Vec<Vec<u8>> {
    use lhc_engine::build::{line, records, SiteBuilder};
    use lhc_engine::config::{DeliveryGroupKind, SiteData};
    let zones = 4;
    let mut site = SiteBuilder::new().site(SiteData::default());
    for z in 0..zones {
        site = site
            .zone(&format!("z{z}"))
            .connector(&format!("cc1.z{z}.example"), &format!("z{z}"));
    }
    for g in 0..b.groups {
        let kind = match g % 3 {
            0 => DeliveryGroupKind::MultiSession,
            1 => DeliveryGroupKind::SingleSessionPooled,
            _ => DeliveryGroupKind::SingleSessionStatic,
        };
        let (group, resource, principals) =
            (format!("dg{g}"), format!("res{g}"), format!("grp{g}"));
        site = site
            .group(&group, kind)
            .desktop(&resource, &[&group])
            .user_group(&principals)
            .entitlement(&format!("ent{g}"), &resource, &[&principals]);
    }
    for v in 0..b.vdas {
        let g = v % b.groups.max(1);
        site = site.machine(
            &format!("vda{v:05}.example"),
            &format!("z{}", v % zones),
            &format!("dg{g}"),
            None,
        );
    }
    // Static groups: each user gets the next machine of their group while machines last.
    let groups = b.groups.max(1);
    let mut next_in_group = vec![0usize; groups];
    for u in 0..b.users {
        let g = u % groups;
        let user = format!("user{u:06}");
        site = site.user(&user, &[&format!("grp{g}")]);
        if g % 3 == 2 {
            let v = g + next_in_group[g] * groups;
            if v < b.vdas {
                next_in_group[g] += 1;
                site = site.assignment(&format!("as{u}"), &format!("vda{v:05}.example"), &user);
            }
        }
    }
    let start = lhc_engine::Ts::parse("2026-01-05T09:00:00.000Z").expect("a valid instant");
    vec![
        line(&site.change(start, 1)),
        line(&records::health_check(
            lhc_engine::Ts(start.millis() + 1000),
            "cc1.z0.example",
            true,
        )),
    ]
}

/// Runs the benchmark.
pub fn run(b: ImportBench) -> anyhow::Result<ExitCode> {
    let records = records(&b);
    let bytes: usize = records.iter().map(Vec::len).sum();
    println!(
        "lhc bench import: {} VDAs, {} users, {} delivery groups (with resources, groups, entitlements): one config.change of {:.1} MB",
        b.vdas,
        b.users,
        b.groups,
        bytes as f64 / 1e6
    );
    // The best run's phases: the change decoded and applied (the cloud's view indexed and
    // machines placed), the import validated (503/504), the commit.
    let mut best = f64::MAX;
    let mut phases = [0f64; 3];
    let mut written = 0u64;
    for _ in 0..3 {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path(), &StoreOptions::default())?;
        let mut folder = Folder::open(&store)?;
        let entries: Vec<LogEntry> = records
            .iter()
            .enumerate()
            .map(|(offset, r)| LogEntry {
                offset: offset as u64,
                bytes: r.clone(),
            })
            .collect();
        let started = Instant::now();
        let mut imported = false;
        let mut marks = [0f64; 3];
        for (entry, mark) in entries.iter().zip(&mut marks) {
            let outputs = folder.apply(entry);
            imported |= outputs
                .iter()
                .any(|o| matches!(o, Output::Event(e) if matches!(e.kind(), Some(EventKind::Imported(_)))));
            *mark = started.elapsed().as_secs_f64();
        }
        folder.commit()?;
        let took = started.elapsed().as_secs_f64();
        marks[2] = took;
        anyhow::ensure!(imported, "the connector did not import (no 504)");
        anyhow::ensure!(
            store.snapshot_families() == vec!["snapshot-v1".to_string()],
            "the import's column family is missing"
        );
        if took < best {
            best = took;
            phases = [marks[0], marks[1] - marks[0], marks[2] - marks[1]];
        }
        written = crate::render::dir_size(dir.path());
    }
    // Baseline: the same number of bytes through one raw WriteBatch into a fresh family.
    let mut raw_best = f64::MAX;
    let payload = vec![b'x'; written.max(bytes as u64) as usize];
    for _ in 0..3 {
        let dir = tempfile::tempdir()?;
        let took = lhc_node::store::raw_batch_write(dir.path(), &payload).context("raw RocksDB")?;
        raw_best = raw_best.min(took.as_secs_f64());
    }
    println!("{:<58} {:>10}", "measure", "seconds");
    println!(
        "{:<58} {:>10.3}",
        "import: decode, apply, validate, build, commit + switch", best
    );
    for (name, seconds) in [
        (
            "  decode and apply the change, index, place machines",
            phases[0],
        ),
        ("  validate the version (503, 504)", phases[1]),
        ("  commit: site, snapshot family, switch", phases[2]),
    ] {
        println!("{name:<58} {seconds:>10.3}");
    }
    println!(
        "{:<58} {:>10.3}",
        format!("raw WriteBatch of {:.1} MB + flush", written as f64 / 1e6),
        raw_best
    );
    println!(
        "\nratio raw / import: {:.2}  (target >= 0.5: {})\nimport: {:.2} s  (target <= 2 s; the seeds: 5,000 VDAs can take more than 10 minutes: {})",
        raw_best / best,
        super::verdict(raw_best / best >= 0.5),
        best,
        super::verdict(best <= 2.0),
    );
    Ok(ExitCode::SUCCESS)
}
