//! Connection slots of the rendezvous. At most `max_connections` are open
//! at once, and at most `max_pending` of them may still be *pending*: their
//! request not yet read, its caller not yet authorized. A connection that
//! finds no room takes the slot of the oldest pending one, which is closed;
//! only when every slot belongs to an established relay socket (whose URL
//! was signed for it) does the accept loop wait. A client that never
//! finishes its request (a head or body trickled a byte at a time, or never
//! sent) therefore delays nobody: it is displaced by the next newcomer, and
//! the request deadline ends it anyway.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::sync::lock;

/// The slots and who holds them.
#[derive(Debug)]
pub struct Admission {
    state: Mutex<State>,
    /// Notified whenever a slot is given back.
    room: Notify,
    max_open: usize,
    max_pending: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Slots held, pending or established.
    open: usize,
    /// Pending connections in admission order, each with the signal that
    /// tells it it was displaced.
    pending: BTreeMap<u64, Arc<Notify>>,
    next_id: u64,
}

/// A connection's slot; given back on drop.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    id: u64,
    established: bool,
    displaced: Arc<Notify>,
}

impl Admission {
    /// `max_open` slots, at most `max_pending` of them pending (both at least 1).
    pub fn new(max_open: usize, max_pending: usize) -> Arc<Self> {
        let max_open = max_open.max(1);
        Arc::new(Self {
            state: Mutex::new(State::default()),
            room: Notify::new(),
            max_open,
            max_pending: max_pending.clamp(1, max_open),
        })
    }

    /// A slot for a connection just accepted, as a pending one: a free slot,
    /// or the slot of the oldest pending connection (which is told to
    /// close). Waits only while every slot is established.
    pub async fn admit(self: &Arc<Self>) -> Slot {
        loop {
            // Registered before the check, so a slot given back in between
            // is not missed.
            let room = self.room.notified();
            if let Some(slot) = self.try_admit() {
                return slot;
            }
            room.await;
        }
    }

    fn try_admit(self: &Arc<Self>) -> Option<Slot> {
        let mut state = lock(&self.state);
        let full = state.open >= self.max_open || state.pending.len() >= self.max_pending;
        if full {
            let (_, displaced) = state.pending.pop_first()?;
            // Its slot passes to the newcomer: `open` does not change.
            displaced.notify_one();
        } else {
            state.open += 1;
        }
        let id = state.next_id;
        state.next_id += 1;
        let displaced = Arc::new(Notify::new());
        state.pending.insert(id, displaced.clone());
        Some(Slot {
            admission: self.clone(),
            id,
            established: false,
            displaced,
        })
    }

    /// Slots held now: (open, pending).
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.open, state.pending.len())
    }
}

impl Slot {
    /// Resolves once a newer connection took this pending slot.
    pub async fn displaced(&self) {
        self.displaced.notified().await;
    }

    /// The connection proved who it is and stays (a relay socket): it can
    /// no longer be displaced. False when it already was.
    pub fn establish(&mut self) -> bool {
        let mut state = lock(&self.admission.state);
        self.established = state.pending.remove(&self.id).is_some();
        self.established
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.admission.state);
        let still_held = state.pending.remove(&self.id).is_some() || self.established;
        if still_held {
            state.open = state.open.saturating_sub(1);
        }
        drop(state);
        self.admission.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::FutureExt;

    fn now<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
        future.now_or_never()
    }

    #[test]
    fn the_oldest_pending_connection_gives_way() {
        let admission = Admission::new(4, 2);
        let first = now(admission.admit()).unwrap();
        let second = now(admission.admit()).unwrap();
        assert!(now(first.displaced()).is_none());
        // The pending share is full: the third takes the first one's slot.
        let third = now(admission.admit()).unwrap();
        assert!(now(first.displaced()).is_some());
        assert!(now(second.displaced()).is_none());
        assert_eq!(admission.counts(), (2, 2));
        drop(first);
        assert_eq!(
            admission.counts(),
            (2, 2),
            "a displaced slot is not freed twice"
        );
        drop((second, third));
        assert_eq!(admission.counts(), (0, 0));
    }

    #[test]
    fn established_connections_keep_their_slots() {
        let admission = Admission::new(2, 2);
        let mut relay = now(admission.admit()).unwrap();
        assert!(relay.establish());
        let mut other = now(admission.admit()).unwrap();
        assert!(other.establish());
        // Every slot is established: a newcomer waits for one to be given back.
        let mut waiting = Box::pin(admission.admit());
        assert!(now(waiting.as_mut()).is_none());
        drop(other);
        let pending = now(waiting.as_mut()).unwrap();
        assert!(now(relay.displaced()).is_none());
        assert_eq!(admission.counts(), (2, 1));
        drop(pending);
        drop(relay);
        assert_eq!(admission.counts(), (0, 0));
    }

    #[test]
    fn a_displaced_connection_cannot_establish() {
        let admission = Admission::new(1, 1);
        let mut old = now(admission.admit()).unwrap();
        let _new = now(admission.admit()).unwrap();
        assert!(!old.establish());
        drop(old);
        assert_eq!(admission.counts(), (1, 1));
    }
}
