//! Taint bookkeeping (issue 19): the labels of an observation, fencing it, indexing what the
//! LLM was shown, and — per proposed call — which arguments carry which steps' data, against
//! a turn that has already seen 1 MB of observations (target ≤ 20 µs p50 per call).
//!
//! `cargo bench -p metnos-planner --bench taint`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use metnos_planner::turn::Hist;
use metnos_planner::turn::taint::{self, Index};
use serde_json::json;

/// Deterministic prose: words from a 3 000-word vocabulary, skewed so common words repeat.
fn prose(seed: u64, bytes: usize) -> String {
    let mut state = seed | 1;
    let mut out = String::with_capacity(bytes + 16);
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let r = state % 3000;
        out.push_str(&format!("w{} ", (r * r) / 3000));
        if state.is_multiple_of(11) {
            out.push_str(".\n");
        }
    }
    out
}

/// A turn that was shown 128 observations of 8 KB (1 MB), as the planner fences them.
fn turn() -> (String, Vec<Hist>, Vec<String>) {
    let nonce = taint::new_nonce();
    let mut pages = Vec::new();
    let history = (1..=128u32)
        .map(|step| {
            let page = prose(u64::from(step), 8_000);
            let shown = json!({"ok": true, "content": page, "step": step}).to_string();
            pages.push(page);
            Hist::Tool {
                call_id: format!("c{step}"),
                name: "web_fetch".into(),
                content: taint::fence(&nonce, step, &[format!("web:s{step}.example")], &shown),
            }
        })
        .collect();
    (nonce, history, pages)
}

fn bench(c: &mut Criterion) {
    let (nonce, history, pages) = turn();
    let mut index = Index::default();
    index.catch_up(&nonce, &history);
    assert!(index.bytes() > 1_000_000 && index.unindexed().is_empty());
    let labels = |step: u32| vec![format!("web:s{step}.example")];
    let person = "find what the pages say about w12 and save a summary in ~/notes/w12.md";

    // A summary the model wrote, quoting one sentence of page 77.
    let quote = &pages[76][1000..1060];
    let summary = format!("{} «{quote}» {}", prose(999, 1000), prose(998, 1000));
    let calls = [
        json!({"url": "https://news.example.com/2026/11/26/rain?lang=en"}),
        json!({"path": "~/notes/w12.md", "content": summary}),
        json!({"path": "~/notes/w12.md", "content": "{{step3.content}}", "mode": "append"}),
        json!({"command": "grep -c w12 ~/notes/w12.md"}),
    ];
    let found = taint::carried(&calls[1], &index, person, &labels);
    assert!(found[0].from_steps.contains(&77), "the quote is found");

    c.bench_function("taint/per_call_mixed_4_calls_over_1MB", |b| {
        let mut i = 0;
        b.iter(|| {
            let args = &calls[i % calls.len()];
            i += 1;
            std::hint::black_box(taint::carried(args, &index, person, &labels))
        })
    });
    c.bench_function("taint/per_call_2KB_summary_over_1MB", |b| {
        b.iter(|| std::hint::black_box(taint::carried(&calls[1], &index, person, &labels)))
    });
    c.bench_function("taint/per_call_url_over_1MB", |b| {
        b.iter(|| std::hint::black_box(taint::carried(&calls[0], &index, person, &labels)))
    });
    let observation = json!({"ok": true, "content": pages[5], "metadata": {"status": 200, "final_url": "https://news.example.com/a"}});
    c.bench_function("taint/per_observation_labels_and_fence_8KB", |b| {
        b.iter(|| {
            let labels = taint::labels_of(
                "web_fetch",
                "https://news.example.com/a",
                &observation,
                false,
            );
            std::hint::black_box(taint::fence(&nonce, 129, &labels, &observation.to_string()))
        })
    });
    let one = vec![history[0].clone()];
    c.bench_function("taint/per_observation_index_8KB", |b| {
        b.iter_batched(
            Index::default,
            |mut index| {
                index.catch_up(&nonce, &one);
                index
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
