//! The one poll loop, for every protocol: a task per connection (a [`Driver`] and the devices
//! behind it) on the pollers' runtime.
//!
//! Invariants:
//! - **Schedule.** Each group of each device is due at its interval; the loop sleeps until the
//!   earliest due group, polls it, and schedules its next start one interval after the
//!   scheduled one (not after the poll): a poll that ran past the next start skips it, counted
//!   in `skipped_total`. How late each poll started is its start jitter.
//! - **Breaker.** A link error closes the connection (the driver reopens it at the next
//!   request). A device that fails twice in a row is skipped for 1 s, doubling up to its
//!   `backoff_max`: the connection keeps polling its healthy devices on time, and a dead unit
//!   of a shared line costs it at most one timeout per backoff step.
//! - **Commands between polls.** The devices of a connection share one inbox; the loop runs a
//!   command **between polls, ahead of the next one**: it waits for the next poll's time *or*
//!   a command, so a command waits at most for the poll in progress, and a write never
//!   interleaves with a poll's frames. A command that expired while it waited is dropped (its
//!   caller was answered `expired`); the driver checks the deadline again before every request
//!   frame. A command for a device that is not connected, or whose breaker waits, is answered
//!   `unavailable` at once: no connect attempt is made for a command, except to reopen a shared
//!   line another unit's failure closed while this one is connected.
//! - **Hold-then-drop.** A poll's samples are one record per group (key: the group's name,
//!   timestamp: the poll's start), offered through [`offer_with_hold`] by the connection's
//!   offer task: the next poll does not wait for the previous sample's commit, but while a
//!   sample is held (a sink refuses it, up to the device's hold, 10 s by default) the loop waits
//!   with its next one.
//! - **Pushed groups.** A group the device pushes (an OPC-UA subscription) is not polled: its
//!   schedule only reopens a closed link (after the breaker's wait), and the points the
//!   device pushes become that group's records as they come, between polls and commands,
//!   through the same offer task. A push side that dies (the session gone, nothing for the
//!   watchdog's time) is a link error like a failed read.
//! - **Status.** The loop keeps each device's [`DeviceStatus`]: state, counters, jitter, the
//!   last error with its hint, and the values of each group (the point catalogue, the trends).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::driver::{Driver, LinkError, Pushed};
use crate::commands::{channel, CommandReceiver, Commands, Pending, PointResult};
use crate::engine::Engine;
use crate::record::{now_ms, Record};
use crate::shutdown::Shutdown;
use crate::sources::hold::{offer_with_hold, Held};
use crate::sources::status::{ConnState, DeviceStatus};

/// The circuit breaker's first wait, unless a protocol's config sets its own.
pub const BACKOFF_START: Duration = Duration::from_secs(1);

/// How often a pushed group checks that its link is open, at most.
const PUSH_CHECK: Duration = Duration::from_secs(1);

/// Consecutive failures → wait before the next try.
#[derive(Debug)]
pub struct Breaker {
    failures: u32,
    retry_at: Option<Instant>,
    start: Duration,
    max: Duration,
}

impl Breaker {
    /// A closed breaker whose first wait is `start` and longest `max`.
    pub fn new(start: Duration, max: Duration) -> Self {
        Self {
            failures: 0,
            retry_at: None,
            start,
            max,
        }
    }

    /// Counts a failure; returns the wait it starts (none after the first failure in a row: a
    /// single glitch is retried at the next poll).
    pub fn fail(&mut self, now: Instant) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.failures < 2 {
            return None;
        }
        let doublings = (self.failures - 2).min(20);
        let wait = self.start.saturating_mul(1u32 << doublings).min(self.max);
        self.retry_at = Some(now + wait);
        Some(wait)
    }

    /// A success closes the breaker.
    pub fn ok(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }

    /// When the device may be tried again; `None` when it may now.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

/// How the loop polls one device: what every protocol's config says alike.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Each group's interval, in the device's group order.
    pub intervals: Vec<Duration>,
    /// How long a refused sample holds the loop before it is dropped.
    pub hold: Duration,
    /// The breaker's first wait ([`BACKOFF_START`] unless the protocol's config sets one).
    pub backoff_start: Duration,
    /// The breaker's longest wait.
    pub backoff_max: Duration,
}

/// One device of a connection, with its plans and schedule.
struct Member<P> {
    status: Arc<DeviceStatus>,
    schedule: Schedule,
    /// Per group: its plan.
    plans: Vec<P>,
    /// Per group: when it is due next.
    next_due: Vec<Instant>,
    /// Per group: true when the device pushes it (it is not polled).
    pushed: Vec<bool>,
    breaker: Breaker,
}

/// A poll's record on its way to the engine.
struct Sample {
    record: Record,
    hold: Duration,
    status: Arc<DeviceStatus>,
}

/// What the loop woke for.
enum Wake {
    Stop,
    Command(Option<Pending>),
    Pushed(Result<Pushed, LinkError>),
    Poll,
}

/// The next command of `inbox`; never, without one.
async fn next_command(inbox: &mut Option<CommandReceiver>) -> Option<Pending> {
    match inbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// One connection's loop: its driver and the devices behind it.
pub struct PollLoop<D: Driver> {
    driver: D,
    members: Vec<Member<D::Plan>>,
    /// The commands of every device of the connection, once registered.
    inbox: Option<CommandReceiver>,
}

impl<D: Driver> PollLoop<D> {
    /// The loop of `driver`, whose devices (in the driver's order) show their figures in the
    /// given statuses and are polled on the given schedules. Plans every group at once.
    pub fn new(driver: D, devices: Vec<(Arc<DeviceStatus>, Schedule)>) -> Self {
        let now = Instant::now();
        let members = devices
            .into_iter()
            .enumerate()
            .map(|(m, (status, schedule))| {
                let groups = schedule.intervals.len();
                Member {
                    plans: (0..groups).map(|g| driver.plan(m, g)).collect(),
                    next_due: vec![now; groups],
                    pushed: (0..groups).map(|g| driver.pushes(m, g)).collect(),
                    breaker: Breaker::new(schedule.backoff_start, schedule.backoff_max),
                    status,
                    schedule,
                }
            })
            .collect();
        Self {
            driver,
            members,
            inbox: None,
        }
    }

    /// The names of the devices it polls.
    pub fn devices(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.status.name().to_string())
            .collect()
    }

    /// Registers every device of the connection with `commands`, with its writable points,
    /// on the connection's one inbox.
    pub fn register(&mut self, commands: &Commands) {
        let (tx, rx) = channel();
        for m in &self.members {
            commands.register_with(m.status.name(), m.status.def.writable(), tx.clone());
        }
        self.inbox = Some(rx);
    }

    /// Polls until `shutdown`.
    pub async fn run(mut self, engine: Arc<Engine>, shutdown: Shutdown) {
        // The samples go to the engine from a task of their own, through a channel of one:
        // a slow commit does not delay the next poll's start, while a refused sample (held,
        // up to the device's hold) still holds the loop once the next one is ready.
        let (samples, mut pending) = tokio::sync::mpsc::channel::<Sample>(1);
        let offerer = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    let sample = tokio::select! {
                        s = pending.recv() => match s {
                            Some(s) => s,
                            None => return,
                        },
                        _ = shutdown.wait() => return,
                    };
                    tokio::select! {
                        held = offer_with_hold(&engine, sample.record, sample.hold) => {
                            if let Held::Lost { .. } = held {
                                sample.status.lost_total.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ = shutdown.wait() => return,
                    }
                }
            })
        };
        // The earliest due (device, group), the breaker's wait included.
        while let Some((m, g, due)) = self.next() {
            // A command waiting goes before the poll that is due; one that comes while the
            // loop sleeps is run at once.
            let wake = tokio::select! {
                biased;
                _ = shutdown.wait() => Wake::Stop,
                c = next_command(&mut self.inbox) => Wake::Command(c),
                p = self.driver.pushed() => Wake::Pushed(p),
                _ = tokio::time::sleep_until(due) => Wake::Poll,
            };
            let sample = match wake {
                Wake::Stop => break,
                Wake::Command(None) => {
                    self.inbox = None;
                    continue;
                }
                Wake::Command(Some(pending)) => {
                    self.command(pending).await;
                    continue;
                }
                Wake::Pushed(Ok(pushed)) => self.take_pushed(pushed),
                Wake::Pushed(Err(e)) => {
                    self.driver.close();
                    // The link serves every device of the driver; the first is named.
                    if let Some(member) = self.members.first_mut() {
                        failed(&self.driver, 0, member, &e);
                    }
                    self.reopen_pushed();
                    None
                }
                Wake::Poll if self.members[m].pushed[g] => {
                    self.keep_open(m, g).await;
                    None
                }
                Wake::Poll => self.poll(m, g).await,
            };
            if let Some(sample) = sample {
                tokio::select! {
                    sent = samples.send(sample) => if sent.is_err() { break },
                    _ = shutdown.wait() => break,
                }
            }
        }
        drop(samples);
        if let Err(e) = offerer.await {
            log::error!("device offer task ended abnormally: {e}");
        }
        self.driver.close();
        for member in &self.members {
            member.status.set_state(ConnState::Stopped);
        }
    }

    /// Polls group `g` of device `m` now: its sample, when the read succeeded.
    async fn poll(&mut self, m: usize, g: usize) -> Option<Sample> {
        let started = Instant::now();
        let started_ms = now_ms();
        let member = self.members.get_mut(m)?;
        let scheduled = *member.next_due.get(g)?;
        if member.breaker.retry_at().is_none() {
            member
                .status
                .record_jitter(started.saturating_duration_since(scheduled));
        }
        let interval = *member.schedule.intervals.get(g)?;
        let mut next = scheduled + interval;
        while next <= started {
            next += interval;
            member.status.skipped_total.fetch_add(1, Ordering::Relaxed);
        }
        member.next_due[g] = next;
        member
            .status
            .last_poll_ms
            .store(started_ms, Ordering::Relaxed);

        let result = read(&mut self.driver, m, member, g).await;
        member.status.last_duration_us.store(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match result {
            Err(e) => {
                let closes = e.closes_link();
                if closes {
                    self.driver.close();
                }
                failed(&self.driver, m, member, &e);
                if closes {
                    self.reopen_pushed();
                }
                None
            }
            Ok(read) => {
                member.breaker.ok();
                member.status.set_state(ConnState::Connected);
                if let Some(group) = member.status.groups.get(g) {
                    group
                        .requests_per_cycle
                        .store(read.requests, Ordering::Relaxed);
                }
                // The values first: whoever sees the poll counted finds them.
                let ts_ms = read.ts_ms.unwrap_or(started_ms);
                member.status.values_in(g, &read.points, ts_ms);
                member.status.count_poll();
                Some(sample(member, g, read.points, ts_ms))
            }
        }
    }

    /// Points device `pushed.member` pushed: its group's values and a sample, as a poll's.
    fn take_pushed(&mut self, pushed: Pushed) -> Option<Sample> {
        let member = self.members.get_mut(pushed.member)?;
        if pushed.points.is_empty() {
            return None;
        }
        let ts_ms = pushed.ts_ms.unwrap_or_else(now_ms);
        member.status.values_in(pushed.group, &pushed.points, ts_ms);
        member.status.polled(Duration::ZERO);
        Some(sample(member, pushed.group, pushed.points, ts_ms))
    }

    /// The schedule of pushed group `g` of device `m`: opens the link when it is closed.
    async fn keep_open(&mut self, m: usize, g: usize) {
        let Some(member) = self.members.get_mut(m) else {
            return;
        };
        let interval = member
            .schedule
            .intervals
            .get(g)
            .copied()
            .unwrap_or(PUSH_CHECK);
        member.next_due[g] = Instant::now() + interval.min(PUSH_CHECK);
        if self.driver.is_open() {
            return;
        }
        match self.driver.open(m).await {
            Ok(()) => {
                member.status.connects_total.fetch_add(1, Ordering::Relaxed);
                member.breaker.ok();
                member.status.set_state(ConnState::Connected);
            }
            Err(e) => {
                self.driver.close();
                failed(&self.driver, m, member, &e);
                self.reopen_pushed();
            }
        }
    }

    /// After the link closed: every pushed group is due at once (after the breaker's wait),
    /// to open it again.
    fn reopen_pushed(&mut self) {
        let now = Instant::now();
        for member in &mut self.members {
            for (due, pushed) in member.next_due.iter_mut().zip(&member.pushed) {
                if *pushed {
                    *due = now;
                }
            }
        }
    }

    /// Runs one command: expired, refused or unavailable without sending anything, else
    /// written by the driver. Answers every point once.
    async fn command(&mut self, pending: Pending) {
        let Some(pending) = pending.unless_expired(std::time::Instant::now()) else {
            return;
        };
        let Some(m) = self
            .members
            .iter()
            .position(|x| x.status.name() == pending.command.device)
        else {
            let why = format!("no device {:?} on this connection", pending.command.device);
            pending.answer_all(PointResult::Refused(why));
            return;
        };
        let writes = match self.driver.check(m, &pending.command) {
            Ok(writes) => writes,
            Err(results) => return pending.answer(results),
        };
        let member = &mut self.members[m];
        if let Some(why) = unavailable(D::DOWN, member, Instant::now()) {
            return pending.answer_all(PointResult::Unavailable(why));
        }
        // Only on a shared line: another unit's failure closed it.
        if !self.driver.is_open() {
            match self.driver.open(m).await {
                Ok(()) => {
                    member.status.connects_total.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let why = format!("the line could not be opened: {e}");
                    return pending.answer_all(PointResult::Unavailable(why));
                }
            }
        }
        let (results, broken) = self
            .driver
            .write(m, &pending.command, writes, &member.status)
            .await;
        pending.answer(results);
        if let Some(e) = broken {
            let closes = e.closes_link();
            if closes {
                self.driver.close();
            }
            failed(&self.driver, m, member, &e);
            if closes {
                self.reopen_pushed();
            }
        }
    }

    fn next(&self) -> Option<(usize, usize, Instant)> {
        let mut best: Option<(usize, usize, Instant)> = None;
        for (m, member) in self.members.iter().enumerate() {
            for (g, &due) in member.next_due.iter().enumerate() {
                let due = member.breaker.retry_at().map_or(due, |r| r.max(due));
                if best.is_none_or(|(_, _, b)| due < b) {
                    best = Some((m, g, due));
                }
            }
        }
        best
    }
}

/// Opens the link when needed, then reads group `g` of `member` (device `m`).
async fn read<D: Driver>(
    driver: &mut D,
    m: usize,
    member: &mut Member<D::Plan>,
    g: usize,
) -> Result<super::driver::GroupRead, LinkError> {
    if !driver.is_open() {
        driver.open(m).await?;
        member.status.connects_total.fetch_add(1, Ordering::Relaxed);
    }
    let Some(plan) = member.plans.get_mut(g) else {
        return Ok(Default::default());
    };
    driver.read(m, plan, &member.status).await
}

/// Why `member` cannot take a command now, if it cannot, in the driver's words `down`: not
/// connected (its last request failed, or it was never reached), or its breaker waits.
fn unavailable<P>(down: &str, member: &Member<P>, now: Instant) -> Option<String> {
    if let Some(at) = member.breaker.retry_at().filter(|&at| at > now) {
        return Some(format!(
            "{down}: in its breaker's backoff for {} ms more (last error: {})",
            (at - now).as_millis(),
            member.status.last_error().unwrap_or_default()
        ));
    }
    match member.status.state() {
        ConnState::Connected => None,
        state => Some(match member.status.last_error() {
            Some(e) => format!("{down} ({}; last error: {e})", state.as_str()),
            None => format!("{down} yet ({})", state.as_str()),
        }),
    }
}

/// Group `g` of `member`'s points as a sample on its way to the engine, stamped `ts_ms`.
fn sample<P>(member: &Member<P>, g: usize, points: Map<String, Value>, ts_ms: u64) -> Sample {
    let key = member.status.groups.get(g).map_or("", |x| x.name.as_str());
    let mut record = Record::from_value(&member.status.def.source, key, &Value::Object(points));
    record.ts_ms = ts_ms;
    Sample {
        record,
        hold: member.schedule.hold,
        status: Arc::clone(&member.status),
    }
}

/// Counts `e` of device `m`, keeps it with its hint, and starts the breaker's wait.
fn failed<D: Driver>(driver: &D, m: usize, member: &mut Member<D::Plan>, e: &LinkError) {
    let s = &member.status;
    match e {
        LinkError::Timeout => s.timeouts_total.fetch_add(1, Ordering::Relaxed),
        _ => s.errors_total.fetch_add(1, Ordering::Relaxed),
    };
    s.note_error(e.to_string(), driver.hint(m, e));
    // The records' source names the protocol's family (`modbus/press-1`): so do the logs.
    let family = s.def.source.split('/').next().unwrap_or_default();
    match member.breaker.fail(Instant::now()) {
        Some(wait) => {
            s.set_state(ConnState::Backoff);
            log::warn!(
                "{family} device failed: device={} error=\"{e}\" backoff_ms={}",
                s.name(),
                wait.as_millis()
            );
        }
        None => {
            s.set_state(ConnState::Connecting);
            log::warn!(
                "{family} device failed: device={} error=\"{e}\" backoff_ms=0",
                s.name()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{Command, Origin, Request};
    use crate::flow::Plan;
    use crate::sources::catalogue::{DeviceDef, GroupDef, PointDef};
    use crate::sources::driver::{GroupRead, Pushed, Results};
    use serde_json::json;

    /// Two devices on one link: device 0 never answers, device 1 always does.
    struct Shared {
        open: bool,
    }

    impl Driver for Shared {
        type Plan = ();
        type Writes = ();

        fn plan(&self, _: usize, _: usize) {}

        fn is_open(&self) -> bool {
            self.open
        }

        async fn open(&mut self, _: usize) -> Result<(), LinkError> {
            self.open = true;
            Ok(())
        }

        async fn read(
            &mut self,
            member: usize,
            _: &mut (),
            _: &DeviceStatus,
        ) -> Result<GroupRead, LinkError> {
            if member == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(LinkError::Timeout);
            }
            let mut points = serde_json::Map::new();
            points.insert("p".into(), json!({"value": 1, "quality": "good"}));
            Ok(GroupRead {
                points,
                requests: 1,
                ts_ms: None,
            })
        }

        fn check(&self, _: usize, _: &Command) -> Result<(), Results> {
            Ok(())
        }

        async fn write(
            &mut self,
            _: usize,
            command: &Command,
            _: (),
            status: &DeviceStatus,
        ) -> (Results, Option<LinkError>) {
            status.writes_total.fetch_add(1, Ordering::Relaxed);
            let results = command
                .points
                .iter()
                .map(|(n, _)| (n.clone(), PointResult::Written))
                .collect();
            (results, None)
        }

        fn hint(&self, member: usize, _: &LinkError) -> Option<String> {
            Some(format!("check unit {member}"))
        }

        fn close(&mut self) {
            self.open = false;
        }
    }

    fn device(name: &str) -> Arc<DeviceStatus> {
        Arc::new(DeviceStatus::new(DeviceDef {
            name: name.into(),
            source: format!("fake/{name}"),
            protocol: "fake",
            address: "line".into(),
            template: None,
            groups: vec![GroupDef::new("main", Duration::from_secs(1))],
            points: vec![PointDef {
                group: "main".into(),
                name: "p".into(),
                area: "register",
                type_name: "u16".into(),
                kind: None,
                unit: None,
                scale: None,
                writable: true,
                min: None,
                max: None,
            }],
            details: Vec::new(),
        }))
    }

    fn engine(dir: &std::path::Path) -> Arc<Engine> {
        // No route from the devices: their samples are settled at once (unrouted), without
        // the writer thread's real time under the paused clock.
        let plan = Plan::direct(&["ingest/other".to_string()], "push");
        Arc::new(crate::engine::test_engine(dir, plan))
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_unit_backs_off_while_its_neighbour_keeps_its_interval_and_takes_commands() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (dead, alive) = (device("dead"), device("alive"));
        let schedule = Schedule {
            intervals: vec![Duration::from_secs(1)],
            hold: Duration::from_secs(10),
            backoff_start: BACKOFF_START,
            backoff_max: Duration::from_secs(4),
        };
        let commands = Commands::new(Default::default());
        let mut line = PollLoop::new(
            Shared { open: false },
            vec![
                (Arc::clone(&dead), schedule.clone()),
                (Arc::clone(&alive), schedule),
            ],
        );
        line.register(&commands);
        let shutdown = Shutdown::new();
        let engine = engine(dir.path());
        let task = tokio::spawn(line.run(Arc::clone(&engine), shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(20_500)).await;
        let polls = alive.polls_total.load(Ordering::Relaxed);
        assert!((20..=21).contains(&polls), "alive polled {polls} times");
        assert_eq!(alive.skipped_total.load(Ordering::Relaxed), 0);
        assert_eq!(alive.state(), ConnState::Connected);
        // 1 + 1 s, 2 s, then 4 s waits: far fewer tries than 20.
        let tries = dead.timeouts_total.load(Ordering::Relaxed);
        assert!((4..=8).contains(&tries), "dead tried {tries} times");
        assert_eq!(dead.state(), ConnState::Backoff);
        assert_eq!(dead.to_json()["last_error_hint"], json!("check unit 0"));

        let request = || Request {
            id: None,
            points: vec![("p".into(), json!(2))],
            expires: None,
            verify: false,
        };
        let origin = || Origin::Http {
            token: "commands".into(),
        };
        let commands = Arc::new(commands);
        let written = commands
            .execute(&engine, "alive", request(), origin())
            .await
            .expect("taken");
        assert!(written.ok(), "{written:?}");
        let refused = commands
            .execute(&engine, "dead", request(), origin())
            .await
            .expect("taken");
        assert!(
            matches!(refused.points[0].1, PointResult::Unavailable(_)),
            "{refused:?}"
        );
        assert_eq!(dead.writes_total.load(Ordering::Relaxed), 0);

        shutdown.trigger();
        task.await.expect("the loop ends on the signal");
        assert_eq!(alive.state(), ConnState::Stopped);
    }

    /// One device whose only group is pushed: a change every 100 ms, and after the fifth of
    /// a session, the link dies.
    struct Pusher {
        open: bool,
        sent: u32,
    }

    impl Driver for Pusher {
        type Plan = ();
        type Writes = ();

        fn plan(&self, _: usize, _: usize) {}

        fn is_open(&self) -> bool {
            self.open
        }

        async fn open(&mut self, _: usize) -> Result<(), LinkError> {
            self.open = true;
            self.sent = 0;
            Ok(())
        }

        async fn read(
            &mut self,
            _: usize,
            _: &mut (),
            _: &DeviceStatus,
        ) -> Result<GroupRead, LinkError> {
            panic!("a pushed group is never read");
        }

        fn check(&self, _: usize, _: &Command) -> Result<(), Results> {
            Ok(())
        }

        async fn write(
            &mut self,
            _: usize,
            _: &Command,
            _: (),
            _: &DeviceStatus,
        ) -> (Results, Option<LinkError>) {
            (Vec::new(), None)
        }

        fn hint(&self, _: usize, _: &LinkError) -> Option<String> {
            None
        }

        fn close(&mut self) {
            self.open = false;
        }

        fn pushes(&self, _: usize, _: usize) -> bool {
            true
        }

        async fn pushed(&mut self) -> Result<Pushed, LinkError> {
            if !self.open {
                return std::future::pending().await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.sent == 5 {
                return Err(LinkError::Transport("connection lost".into()));
            }
            self.sent += 1;
            let mut points = serde_json::Map::new();
            points.insert("p".into(), json!({"value": self.sent, "quality": "good"}));
            Ok(Pushed {
                member: 0,
                group: 0,
                points,
                ts_ms: Some(1_000 + u64::from(self.sent)),
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushed_group_is_opened_without_polls_and_reopened_after_its_link_dies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = device("sub");
        let schedule = Schedule {
            intervals: vec![Duration::from_millis(100)],
            hold: Duration::from_secs(10),
            backoff_start: Duration::from_millis(500),
            backoff_max: Duration::from_secs(4),
        };
        let driver = Pusher {
            open: false,
            sent: 0,
        };
        let line = PollLoop::new(driver, vec![(Arc::clone(&status), schedule)]);
        let shutdown = Shutdown::new();
        let task = tokio::spawn(line.run(engine(dir.path()), shutdown.clone()));
        // Five changes, the link lost, opened again at once (a single failure has no wait),
        // five more, lost again.
        tokio::time::sleep(Duration::from_millis(1_250)).await;
        assert_eq!(status.polls_total.load(Ordering::Relaxed), 10);
        assert_eq!(status.connects_total.load(Ordering::Relaxed), 3);
        assert_eq!(status.errors_total.load(Ordering::Relaxed), 2);
        assert_eq!(status.state(), ConnState::Connected);
        // No poll was scheduled, so none started late.
        assert_eq!(status.jitter(), (Duration::ZERO, Duration::ZERO));
        assert_eq!(status.values()["main"]["p"]["value"], json!(5));
        shutdown.trigger();
        task.await.expect("the loop ends on the signal");
    }

    #[test]
    fn the_breaker_retries_a_glitch_at_once_then_doubles_up_to_its_cap() {
        let now = Instant::now();
        let mut b = Breaker::new(BACKOFF_START, Duration::from_secs(5));
        assert_eq!(b.fail(now), None);
        assert_eq!(b.fail(now), Some(Duration::from_secs(1)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(2)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(4)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(5)));
        for _ in 0..100 {
            b.fail(now);
        }
        assert_eq!(b.retry_at(), Some(now + Duration::from_secs(5)));
        b.ok();
        assert_eq!(b.retry_at(), None);
        assert_eq!(b.fail(now), None);
    }
}
