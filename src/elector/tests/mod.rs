//! Unit tests of the election rules: one file per concern, each test named for the SPEC
//! rule it checks and comparing the exact actions out. The harness is here: [`H`] drives one
//! elector in virtual time.

mod control;
mod fencing;
mod follow;
mod forgotten_commit;
mod herd_free;
mod join;
mod lease;
mod leave;
mod leftovers;
mod placement;
mod priority;
mod promote;
mod reason;
mod service;
mod stand_aside;

use super::*;
use crate::record::{Health, Remembered};

const T: Duration = Duration::from_secs(6); // session timeout: lease 3s, renewals 1s
const GRACE: Duration = Duration::from_millis(500);

fn cfg() -> ElectorConfig {
    ElectorConfig {
        node_id: "n1".into(),
        incarnation: "inc-1".into(),
        session_timeout: T,
        rejoin_delay: Duration::from_secs(1),
        demote_grace: GRACE,
        host: crate::record::HostIdentity {
            boot_id: "b00700000000000000000000000000aa".into(),
            machine_id: "3a000000000000000000000000000001".into(),
            pid_ns: Some(4026531836),
        },
        follow: false,
        priority: 100,
        standby_check: false,
        settle: false,
    }
}

fn record(node: &str, inc: &str, epoch: Option<Epoch>) -> NodeRecord {
    NodeRecord {
        node_id: node.into(),
        incarnation: inc.into(),
        epoch,
        ..Default::default()
    }
}

/// A switchover request from n2 naming this node (n1).
fn request_to_n1() -> FailoverView {
    FailoverView {
        from: "n2".into(),
        to: Some("n1".into()),
        deadline: "2026-01-01T00:00:30Z".into(),
        force: false,
        lapses_at: Instant::now(),
    }
}

/// A healthy standby's member record with `priority` and `position`.
fn standby(id: &str, priority: u16, position: Option<u64>) -> MemberRecord {
    MemberRecord {
        priority: Some(priority),
        position,
        ..MemberRecord::bare(
            NodeRecord {
                node_id: id.into(),
                ..NodeRecord::default()
            },
            Role::Standby,
            Health::Healthy,
        )
    }
}

/// One elector and virtual time.
struct H {
    e: Elector,
    now: Instant,
}

impl H {
    fn new() -> H {
        let now = Instant::now();
        let mut e = Elector::new(cfg(), true);
        assert_eq!(e.poll_action(), Some(Action::Connect));
        H { e, now }
    }

    fn drain(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.e.poll_action()).collect()
    }

    /// Feeds an event; returns the actions, transitions left out.
    fn feed(&mut self, ev: Event) -> Vec<Action> {
        self.e.handle(ev, self.now);
        strip(self.drain())
    }

    fn feed_all(&mut self, ev: Event) -> Vec<Action> {
        self.e.handle(ev, self.now);
        self.drain()
    }

    /// Moves virtual time forward, firing every timeout on the way in order.
    fn advance(&mut self, d: Duration) -> Vec<Action> {
        let end = self.now + d;
        let mut out = Vec::new();
        while let Some(t) = self.e.poll_timeout().filter(|t| *t <= end) {
            self.now = t.max(self.now);
            self.e.handle_timeout(self.now);
            out.extend(self.drain());
        }
        self.now = end;
        self.e.handle_timeout(self.now);
        out.extend(self.drain());
        strip(out)
    }

    fn ticket_of(actions: &[Action]) -> Ticket {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Join { ticket }
                | Action::ReadState { ticket }
                | Action::RestoreBreadcrumb { ticket, .. }
                | Action::RestoreOwnBreadcrumb { ticket, .. }
                | Action::Fence { ticket, .. }
                | Action::CommitPromotion { ticket, .. }
                | Action::StartService { ticket, .. }
                | Action::Renew { ticket }
                | Action::StopService { ticket, .. }
                | Action::Release { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .expect("an action with a ticket")
    }

    fn ticket_of_record(actions: &[Action]) -> Ticket {
        actions
            .iter()
            .find_map(|a| match a {
                Action::RecordService { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .expect("a RecordService action")
    }

    fn session(&mut self) -> Ticket {
        let a = self.feed(Event::SessionStarted {
            granted: None,
            control: ControlView::default(),
        });
        assert!(matches!(a.as_slice(), [Action::Join { .. }]), "{a:?}");
        H::ticket_of(&a)
    }

    fn read(&mut self, ticket: Ticket, breadcrumb: BreadcrumbView) -> Vec<Action> {
        self.read_all(ticket, state(breadcrumb))
    }

    /// Answers the state read `ticket` with `state`.
    fn read_all(&mut self, ticket: Ticket, state: ClusterState) -> Vec<Action> {
        self.feed(Event::StateRead {
            ticket,
            result: Ok(Box::new(state)),
        })
    }

    /// Answers the join `ticket`: the lock is ours at `epoch`. Returns the state read's
    /// ticket.
    fn held(&mut self, ticket: Ticket, epoch: Epoch) -> Ticket {
        let a = self.feed(Event::Joined {
            ticket,
            outcome: JoinOutcome::Held { epoch },
        });
        assert!(matches!(a.as_slice(), [Action::ReadState { .. }]), "{a:?}");
        H::ticket_of(&a)
    }

    /// Session, lock won at `epoch`: the state read is out; returns its ticket.
    fn won(&mut self, epoch: Epoch) -> Ticket {
        let j = self.session();
        self.held(j, epoch)
    }

    /// Won the lock at `epoch`, the breadcrumb read empty: the commit is out; returns its
    /// ticket.
    fn committing(&mut self, epoch: Epoch) -> Ticket {
        let r = self.won(epoch);
        let a = self.read(r, BreadcrumbView::Absent);
        assert!(commits(&a), "{a:?}");
        H::ticket_of(&a)
    }

    /// Won the lock at `epoch` and committed: the start is in flight; returns its ticket.
    fn starting(&mut self, epoch: Epoch) -> Ticket {
        let c = self.committing(epoch);
        let a = self.feed(Event::Committed {
            ticket: c,
            outcome: WriteOutcome::Done,
        });
        assert!(
            matches!(a.as_slice(), [Action::StartService { .. }]),
            "{a:?}"
        );
        H::ticket_of(&a)
    }

    /// Won the lock at `epoch`, committed, the service up and recorded: active.
    fn active(&mut self, epoch: Epoch) {
        let s = self.starting(epoch);
        let a = self.feed(Event::ServiceStarted { ticket: s });
        self.recorded(&a);
        assert_eq!(self.e.role(), Role::Active);
    }

    /// Acknowledges the `RecordService` among `actions`; returns what follows.
    fn recorded(&mut self, actions: &[Action]) -> Vec<Action> {
        self.feed(Event::ServiceRecorded {
            ticket: H::ticket_of_record(actions),
            outcome: WriteOutcome::Done,
        })
    }
}

/// A state read with `breadcrumb` and nothing else of note.
fn state(breadcrumb: BreadcrumbView) -> ClusterState {
    ClusterState {
        breadcrumb,
        control: ControlView::default(),
        control_version: Version::new(0),
        newest_history_epoch: None,
        history_by_node: Default::default(),
        confirmed_by_node: Default::default(),
        remembered_alive: false,
        own_service_gone: false,
        members_epoch_seen: None,
        members: Vec::new(),
        own_position: None,
        member_leftovers: Vec::new(),
        member_memories: Vec::new(),
    }
}

fn strip(actions: Vec<Action>) -> Vec<Action> {
    actions
        .into_iter()
        .filter(|a| {
            !matches!(
                a,
                Action::Transition { .. } | Action::WriteHeld | Action::Notice { .. }
            )
        })
        .collect()
}

/// The actions are one release that keeps the breadcrumb (whoever wins fences this node).
fn assert_released_keeping_breadcrumb(actions: &[Action]) {
    assert!(
        matches!(
            actions,
            [Action::Release {
                breadcrumb: None,
                ..
            }]
        ),
        "{actions:?}"
    );
}

/// The actions are one forced stop: the node demotes as one whose lock may be lost, and is
/// not active.
fn assert_forced_stop(h: &H, actions: &[Action]) {
    assert!(
        matches!(
            actions,
            [Action::StopService {
                cause: StopCause::Forced,
                ..
            }]
        ),
        "{actions:?}"
    );
    assert_ne!(h.e.role(), Role::Active);
}

fn has(actions: &[Action], f: impl Fn(&Action) -> bool) -> bool {
    actions.iter().any(f)
}

/// The actions are the commit of a promotion, and nothing else.
fn commits(actions: &[Action]) -> bool {
    matches!(actions, [Action::CommitPromotion { .. }])
}
