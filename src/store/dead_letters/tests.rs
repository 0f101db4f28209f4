//! The dead-letter queue: park, read back, filter and page, correct, resolve, trim at the cap,
//! and keep everything across a restart.

use serde_json::json;

use super::*;

fn record(n: u64) -> Record {
    let mut r = Record::from_value("webhook/stripe", format!("k-{n}"), &json!({"n": n}));
    r.ts_ms = 1_000 + n;
    r
}

fn letter(n: u64, flow: &str) -> NewDeadLetter {
    NewDeadLetter {
        record: record(n),
        flow: flow.to_string(),
        node: "tag".to_string(),
        reason: format!("missing field payload.x ({n})"),
        accepted: n % 2 == 0,
    }
}

fn ids(entries: &[DeadLetterEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.id).collect()
}

fn filter(flow: Option<&str>, state: Option<DlqState>, after: Option<u64>) -> DlqFilter {
    DlqFilter {
        flow: flow.map(str::to_string),
        state,
        after,
        limit: 100,
    }
}

#[test]
fn a_parked_record_reads_back_with_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    let original = record(4);
    let id = q.park(letter(4, "payments")).unwrap();
    let e = q.get(id).unwrap().unwrap();
    assert_eq!(e.id, id);
    assert_eq!(e.flow, "payments");
    assert_eq!(e.node, "tag");
    assert_eq!(e.reason, "missing field payload.x (4)");
    assert_eq!(e.state, DlqState::Open);
    assert!(e.accepted);
    assert_eq!(e.resolution, None);
    assert!(e.at_ms > 0);
    assert_eq!(e.record["source"], "webhook/stripe");
    assert_eq!(e.record["key"], "k-4");
    assert_eq!(e.record["ts"], 1004);
    assert_eq!(e.record["payload"], json!({"n": 4}));
    let (r, flow) = q.record(id).unwrap().unwrap();
    assert_eq!(flow, "payments");
    assert_eq!(r.key, original.key);
    assert_eq!(r.payload.get(), original.payload.get());
    assert!(q.get(id + 1).unwrap().is_none());
    assert!(q.record(id + 1).unwrap().is_none());
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["state"], "open");
}

#[test]
fn list_filters_by_flow_and_state_and_pages_after_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 100).unwrap();
    let mut parked = Vec::new();
    for n in 0..10 {
        let flow = if n % 3 == 0 { "a" } else { "b" };
        parked.push(q.park(letter(n, flow)).unwrap());
    }
    // Ids 0, 3, 6, 9 are flow a.
    assert!(q.resolve(parked[3], "replayed").unwrap());
    assert!(q.resolve(parked[4], "deleted").unwrap());

    assert_eq!(ids(&q.list(&filter(None, None, None)).unwrap()), parked);
    assert_eq!(
        ids(&q.list(&filter(Some("a"), None, None)).unwrap()),
        vec![0, 3, 6, 9]
    );
    assert_eq!(
        ids(&q
            .list(&filter(Some("a"), Some(DlqState::Open), None))
            .unwrap()),
        vec![0, 6, 9]
    );
    assert_eq!(
        ids(&q
            .list(&filter(None, Some(DlqState::Resolved), None))
            .unwrap()),
        vec![3, 4]
    );
    assert_eq!(
        ids(&q
            .list(&filter(Some("b"), Some(DlqState::Resolved), None))
            .unwrap()),
        vec![4]
    );
    assert!(q.list(&filter(Some("zzz"), None, None)).unwrap().is_empty());

    // Paging: pages of 3, each after the last id seen, oldest first.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = q
            .list(&DlqFilter {
                flow: None,
                state: Some(DlqState::Open),
                after,
                limit: 3,
            })
            .unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 3);
        after = page.last().map(|e| e.id);
        seen.extend(ids(&page));
    }
    assert_eq!(seen, vec![0, 1, 2, 5, 6, 7, 8, 9]);
    assert_eq!(
        ids(&q.list(&filter(None, None, Some(7))).unwrap()),
        vec![8, 9]
    );
}

#[test]
fn update_payload_replaces_the_payload_on_one_line_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    let id = q.park(letter(1, "payments")).unwrap();
    let (before, _) = q.record(id).unwrap().unwrap();
    let fixed = RawValue::from_string("{\n  \"n\": 1,\r\n  \"x\": \"ok\"\n}".to_string()).unwrap();
    assert!(q.update_payload(id, fixed).unwrap());
    let (after, flow) = q.record(id).unwrap().unwrap();
    assert_eq!(flow, "payments");
    assert_eq!(after.id, before.id);
    assert_eq!(after.key, before.key);
    assert_eq!(after.ts_ms, before.ts_ms);
    assert_eq!(after.payload_value(), json!({"n": 1, "x": "ok"}));
    assert!(!after.to_line().contains(&b'\n'), "the uplink sends lines");
    assert_eq!(q.get(id).unwrap().unwrap().state, DlqState::Open);
    let other = RawValue::from_string("{}".to_string()).unwrap();
    assert!(!q.update_payload(id + 1, other).unwrap());
}

#[test]
fn resolve_records_the_resolution_once_and_moves_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    let a = q.park(letter(1, "f")).unwrap();
    let b = q.park(letter(2, "f")).unwrap();
    assert!(q.resolve(a, "replayed").unwrap());
    let e = q.get(a).unwrap().unwrap();
    assert_eq!(e.state, DlqState::Resolved);
    assert_eq!(e.resolution.as_deref(), Some("replayed"));
    assert!(e.resolved_at_ms.is_some());
    // A second resolution keeps the first.
    assert!(q.resolve(a, "deleted").unwrap());
    assert_eq!(
        q.get(a).unwrap().unwrap().resolution.as_deref(),
        Some("replayed")
    );
    assert!(!q.resolve(b + 1, "deleted").unwrap());
    assert_eq!(
        q.counts(),
        DlqCounts {
            open: 1,
            resolved: 1,
            parked_total: 2,
            trimmed_total: 0,
            trimmed_open_total: 0,
        }
    );
}

#[test]
fn at_the_cap_resolved_entries_are_trimmed_first_then_the_oldest_open() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 4).unwrap();
    for n in 0..4 {
        q.park(letter(n, "f")).unwrap();
    }
    // Resolve 1 and 3: they go before the older open 0.
    q.resolve(1, "deleted").unwrap();
    q.resolve(3, "replayed").unwrap();
    q.park(letter(4, "f")).unwrap();
    assert_eq!(
        ids(&q.list(&filter(None, None, None)).unwrap()),
        [0, 2, 3, 4]
    );
    q.park(letter(5, "f")).unwrap();
    assert_eq!(
        ids(&q.list(&filter(None, None, None)).unwrap()),
        [0, 2, 4, 5]
    );
    assert!(
        q.take_trimmed_open().is_empty(),
        "resolved entries are no loss"
    );
    // No resolved entry left: the oldest open one goes, a loss kept for the ledger.
    q.park(letter(6, "f")).unwrap();
    assert_eq!(
        q.take_trimmed_open(),
        BTreeMap::from([("webhook/stripe".to_string(), 1)])
    );
    assert!(q.take_trimmed_open().is_empty(), "taken once");
    assert_eq!(
        ids(&q.list(&filter(None, None, None)).unwrap()),
        [2, 4, 5, 6]
    );
    assert!(q.get(0).unwrap().is_none());
    assert_eq!(
        q.counts(),
        DlqCounts {
            open: 4,
            resolved: 0,
            parked_total: 7,
            trimmed_total: 3,
            trimmed_open_total: 1,
        }
    );
    assert!(q
        .list(&filter(Some("f"), Some(DlqState::Resolved), None))
        .unwrap()
        .is_empty());
}

#[test]
fn entries_states_and_counts_survive_a_reopen_and_ids_are_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 3).unwrap();
    for n in 0..5 {
        q.park(letter(n, if n < 2 { "a" } else { "b" })).unwrap();
    }
    q.resolve(3, "deleted").unwrap();
    let counts = q.counts();
    let listed = ids(&q.list(&filter(None, None, None)).unwrap());
    q.close();

    let q = DeadLetterQueue::open(dir.path(), 3).unwrap();
    assert_eq!(q.counts(), counts);
    assert_eq!(
        counts,
        DlqCounts {
            open: 2,
            resolved: 1,
            parked_total: 5,
            trimmed_total: 2,
            trimmed_open_total: 2,
        }
    );
    assert_eq!(ids(&q.list(&filter(None, None, None)).unwrap()), listed);
    assert_eq!(
        ids(&q
            .list(&filter(Some("b"), Some(DlqState::Open), None))
            .unwrap()),
        vec![2, 4]
    );
    assert_eq!(q.park(letter(9, "a")).unwrap(), 5);
    // The resolved 3 went first.
    assert_eq!(ids(&q.list(&filter(None, None, None)).unwrap()), [2, 4, 5]);
    q.close();

    // A smaller cap at the next start trims on the next park, oldest open first.
    let q = DeadLetterQueue::open(dir.path(), 1).unwrap();
    q.park(letter(10, "a")).unwrap();
    assert_eq!(ids(&q.list(&filter(None, None, None)).unwrap()), [6]);
    assert_eq!(q.counts().trimmed_total, 6);
    assert_eq!(q.counts().trimmed_open_total, 5, "2, 4 and 5 were open");
}

#[test]
fn the_inbox_keeps_requests_until_removed_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    let a = q.inbox_put(b"first", None).unwrap();
    let b = q.inbox_put(b"second", None).unwrap();
    let c = q.inbox_put(b"third", None).unwrap();
    assert!(a < b && b < c);
    q.inbox_remove(b).unwrap();
    q.inbox_remove(999).unwrap();
    q.close();

    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    assert_eq!(
        q.inbox_all().unwrap(),
        vec![(a, b"first".to_vec()), (c, b"third".to_vec())]
    );
    // Inbox requests are not dead letters.
    assert_eq!(q.counts(), DlqCounts::default());
    q.inbox_remove(c).unwrap();
    q.inbox_remove(a).unwrap();
    assert!(q.inbox_all().unwrap().is_empty());
    // Ids keep growing after the inbox was emptied and reopened.
    q.close();
    let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
    assert!(q.inbox_put(b"next", None).unwrap() > c);
}
