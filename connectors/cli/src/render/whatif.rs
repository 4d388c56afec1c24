//! The what-if comparison as one self-contained HTML page (maud; no script, no external
//! request): the verdict, the changes, launches and zones before and after as tables with
//! bars, every changed decision and the flagged machines.
//!
//! Invariant: the page shows only what `lhc_replay::WhatIf` holds.

use lhc_replay::whatif::{thousands, Outcome, WhatIf};
use maud::{html, Markup};

use super::duration;

/// Changed decisions shown (the JSON has them all).
const ROWS: usize = 2000;

const CSS: &str = ".verdict{font-size:16px;background:#f6f8ff;border-left:4px solid #3b5bdb;\
    padding:8px 12px;max-width:900px}.better{color:#2b8a3e}.worse{color:#c92a2a}\
    .bar{display:inline-block;height:10px;vertical-align:middle}.b{background:#adb5bd}\
    .a{background:#3b5bdb}td.n{text-align:right;font-variant-numeric:tabular-nums}\
    .wrap{overflow-x:auto}code{font-size:12px}";

fn bars(before: u64, after: u64, max: u64) -> Markup {
    let w = |n: u64| 120.0 * n as f64 / max.max(1) as f64;
    html! {
        span.bar.b style=(format!("width:{:.1}px", w(before))) {}
        br;
        span.bar.a style=(format!("width:{:.1}px", w(after))) {}
    }
}

/// A table row: the two sides as text, and their bars.
fn row_of(name: &str, texts: (String, String), values: (u64, u64), max: u64) -> Markup {
    html! {
        tr {
            td { (name) }
            td.n { (texts.0) }
            td.n { (texts.1) }
            td { (bars(values.0, values.1, max)) }
        }
    }
}

fn row(name: &str, before: u64, after: u64, max: u64) -> Markup {
    row_of(
        name,
        (thousands(before), thousands(after)),
        (before, after),
        max,
    )
}

fn span_row(name: &str, before: i64, after: i64, max: i64) -> Markup {
    let (b, a) = (before.max(0) as u64, after.max(0) as u64);
    row_of(
        name,
        (duration(before), duration(after)),
        (b, a),
        max.max(1) as u64,
    )
}

fn outcome(o: &Option<Outcome>) -> Markup {
    match o {
        None => html! { em { "no request" } },
        Some(o) => html! {
            (o.outcome) " via " (o.via)
            @if let Some(m) = &o.machine { br; code { (m) } }
        },
    }
}

/// The page.
pub fn page(w: &WhatIf) -> String {
    let launches_max = [
        w.before.launches,
        w.after.launches,
        w.before.attempts,
        w.after.attempts,
    ]
    .into_iter()
    .max()
    .unwrap_or(1);
    let body = html! {
        p { "Source: " code { (w.source) } }
        p.verdict { (w.verdict) }
        h2 { "Changes" }
        ul { @for c in &w.changes { li { (c) } } }
        @if !w.notes.is_empty() {
            ul { @for n in &w.notes { li { em { (n) } } } }
        }
        p {
            "As it happened: " (thousands(w.before.records)) " records, state digest "
            code { (w.before.digest) } " (the digest " code { "lhc replay --digest" }
            " prints). What-if: " (thousands(w.after.records)) " records, digest "
            code { (w.after.digest) } "."
        }
        h2 { "Launches" }
        p { "Grey bar: as it happened; blue bar: what-if." }
        table {
            tr { th { "" } th { "as it happened" } th { "what-if" } th { "" } }
            (row("launches users made", w.before.launches, w.after.launches, launches_max))
            (row("refused (last attempt rejected)", w.before.refused, w.after.refused, launches_max))
            (row("users affected", w.before.users_affected.len() as u64,
                w.after.users_affected.len() as u64, launches_max))
            (row("attempts", w.before.attempts, w.after.attempts, launches_max))
            @for t in &w.totals {
                (row(&format!("· {}", t.outcome), t.before, t.after, launches_max))
            }
        }
        p {
            span.better { (thousands(w.better)) " better" } ", "
            span.worse { (thousands(w.worse)) " worse" } ", "
            (thousands(w.other)) " otherwise different."
        }
        h2 { "Zones" }
        @for z in &w.zones {
            @let (b, a) = (&z.before, &z.after);
            @let max = b.lhc_s.max(a.lhc_s);
            h3 { "Zone " (z.zone) }
            table {
                tr { th { "" } th { "as it happened" } th { "what-if" } th { "" } }
                (row("LHC episodes", b.episodes, a.episodes, b.episodes.max(a.episodes)))
                (span_row("in LHC mode", b.lhc_s, a.lhc_s, max))
                (span_row("· brokering", b.brokering_s, a.brokering_s, max))
                (span_row("· without a broker", b.no_broker_s, a.no_broker_s, max))
                tr { td { "brokers" } td { (b.brokers.join(", ")) } td { (a.brokers.join(", ")) } td {} }
                (row("election changes (3504)", b.elections, a.elections, b.elections.max(a.elections)))
                (row("failed imports (505)", b.import_failures, a.import_failures,
                    b.import_failures.max(a.import_failures)))
                (row("decided on a stale snapshot", b.decided_on_stale, a.decided_on_stale,
                    b.decided_on_stale.max(a.decided_on_stale)))
                (row("attempts brokered", b.brokered, a.brokered, b.brokered.max(a.brokered)))
                (row("attempts rejected", b.rejected, a.rejected, b.rejected.max(a.rejected)))
            }
        }
        h2 { "Decisions that changed (" (thousands(w.changed.len() as u64)) ")" }
        @if w.changed.len() > ROWS {
            p { "The first " (ROWS) "; " code { "--format json" } " lists them all." }
        }
        div.wrap {
            table {
                tr {
                    th { "time" } th { "request" } th { "user" } th { "resource" }
                    th { "connector" } th { "change" } th { "as it happened" } th { "what-if" }
                }
                @for c in w.changed.iter().take(ROWS) {
                    tr {
                        td { (c.ts) } td { (c.request) } td { (c.user) } td { (c.resource) }
                        td { (c.connector) }
                        td class=(c.change) { (c.change) }
                        td { (outcome(&c.before)) } td { (outcome(&c.after)) }
                    }
                }
            }
        }
        h2 { "Sessions after a changed decision" }
        p { (w.session_policy) }
        @if w.flagged_machines.is_empty() {
            p { "No machine is flagged." }
        } @else {
            div.wrap {
                table {
                    tr { th { "machine" } th { "requests" } th { "why" } }
                    @for m in w.flagged_machines.iter().take(ROWS) {
                        tr { td { code { (m.machine) } } td { (m.requests.join(", ")) } td { (m.why) } }
                    }
                }
            }
        }
    };
    super::page("What if", CSS, body)
}
