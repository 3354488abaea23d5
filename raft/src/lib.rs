//! siltdb under openraft: a replicated key-value store whose Raft log and state machine both
//! live in one siltdb database per node.
//!
//! The storage half ([`open_store`], [`LogStore`], [`StateMachine`]) is what a user who embeds
//! openraft needs: give the two values to [`openraft::Raft::new`] with any network that
//! delivers snapshots through `Raft::install_snapshot` (chunks), as the node's does. Not
//! through `Raft::install_full_snapshot`: openraft then skips `begin_receiving_snapshot`,
//! which arms the wait that keeps a follower's log purge behind its saved snapshot file, and
//! a crash between the two could leave entries purged that neither the data nor the file
//! holds. The cluster half ([`node`], [`client`], [`local_cluster`]) is a small replicated store over
//! TCP on loopback, run by the `siltdb-raft-node` binary, which the tests and the figures in
//! `docs/raft.md` use.
//!
//! Key layout inside the node's database (one byte of prefix each, see [`keys`]): `l` + the
//! big-endian log index for entries, `m/…` for the vote, the last purged log id and the
//! committed log id, `s/applied` for the state machine's last applied log id and membership,
//! and `d` + the user key for the replicated data.

#![deny(missing_docs)]

pub mod client;
mod error;
pub mod keys;
pub mod local_cluster;
mod log_store;
mod network;
pub mod node;
mod snapshot_cover;
mod snapshot_file;
mod state_machine;
mod store;
mod types;
pub mod wire;

pub use error::Error;
pub use log_store::{LogReader, LogStore};
pub use network::{PeerClient, TcpNetwork};
pub use state_machine::{SnapshotBuilder, StateMachine};
pub use store::open_store;
pub use types::{Request, Response, TypeConfig};

/// The longest user key siltdb-raft stores: siltdb's `MAX_KEY_SIZE` less the one-byte data
/// prefix.
pub const MAX_USER_KEY: usize = siltdb::MAX_KEY_SIZE - 1;

/// True if siltdb can store this key and value under the data prefix (a delete: an empty
/// value). The client API and the state machine both ask it, so a write is refused the same
/// way before the log and, if it got there anyway, on every node.
pub(crate) fn storable(key: &str, value: &str) -> bool {
    key.len() <= MAX_USER_KEY && value.len() <= siltdb::MAX_VALUE_SIZE
}

/// Room in a frame for all of an append-entries request but one entry's key and value (the
/// vote, the log ids, the entry's envelope: a few hundred bytes of JSON).
const FRAME_ROOM: usize = 64 << 10;

/// The most bytes `s` can take as a JSON string: serde_json writes `"` and `\` in two bytes
/// and a control character in at most six.
fn json_len(s: &str) -> usize {
    let escaped: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum();
    escaped + 2
}

/// True if `req` can be replicated: siltdb can store its key and value (a key of at most
/// [`MAX_USER_KEY`] bytes, a value of at most siltdb's `MAX_VALUE_SIZE`), and its log entry
/// alone fits one network frame ([`wire::MAX_FRAME`], 64 MiB, as JSON), so that a leader can
/// always send it to a follower.
///
/// The node's client API refuses a write for which this is false. A program that proposes
/// entries itself (`Raft::client_write`) should check it too: an entry that does not fit a
/// frame can never reach a follower.
pub fn request_fits(req: &Request) -> bool {
    let (key, value) = match req {
        Request::Put { key, value } => (key.as_str(), value.as_str()),
        Request::Delete { key } => (key.as_str(), ""),
    };
    storable(key, value) && json_len(key) + json_len(value) + FRAME_ROOM <= wire::MAX_FRAME
}

/// The longest node address a membership may hold: 1024 bytes (a host name and a port fit
/// many times over).
pub const MAX_NODE_ADDR: usize = 1024;

/// The most nodes (voters and learners) a membership may hold: 256.
pub const MAX_MEMBERS: usize = 256;

/// True if a membership of nodes with these addresses can be replicated. Every membership
/// entry, and every snapshot chunk, carries all of the addresses (twice during a joint
/// change): at most [`MAX_MEMBERS`] of at most [`MAX_NODE_ADDR`] bytes each keep that under
/// 2 MiB of JSON, far from a frame's [`wire::MAX_FRAME`]. An entry too large for a frame could
/// never reach a follower, and every write after it would wait for it forever.
///
/// The node's client API refuses an `Init` or `AddLearner` for which this is false; a
/// program that changes the membership itself (`Raft::add_learner`, `Raft::initialize`)
/// should check it too.
pub fn membership_fits<'a>(addrs: impl IntoIterator<Item = &'a str>) -> bool {
    let mut n = 0;
    for a in addrs {
        n += 1;
        if a.len() > MAX_NODE_ADDR || n > MAX_MEMBERS {
            return false;
        }
    }
    true
}

/// True for a node address a peer can dial: `host:port`, a non-empty host and a port that is
/// a number from 1 to 65535. A learner added with any other address could never be reached,
/// and openraft keeps the first address it is given for a node id (adding it again does not
/// change it).
pub(crate) fn valid_node_addr(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

/// The instant `timeout` from now; a timeout too long for the clock (`Duration::MAX`) is a
/// hundred years.
pub(crate) fn deadline_after(timeout: std::time::Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// The node id type: openraft's default, `u64`.
pub type NodeId = u64;
/// The Raft handle for siltdb-raft's type configuration.
pub type Raft = openraft::Raft<TypeConfig>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Review finding (session 23): `Instant::now() + Duration::MAX` panicked in the
    /// client's and `LocalCluster`'s waits; an address without a port was accepted for a
    /// learner that could then never be reached nor re-addressed.
    #[test]
    fn deadlines_do_not_overflow_and_node_addresses_need_a_port() {
        let far = deadline_after(std::time::Duration::MAX);
        assert!(far > std::time::Instant::now() + std::time::Duration::from_secs(86_400));
        for ok in ["127.0.0.1:21001", "node-2:1", "[::1]:8080"] {
            assert!(valid_node_addr(ok), "{ok}");
        }
        for bad in [
            "typo",
            "host:",
            ":80",
            "host:0",
            "host:65536",
            "host:http",
            "",
        ] {
            assert!(!valid_node_addr(bad), "{bad}");
        }
    }
    use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
    use std::collections::BTreeMap;

    /// The frame an append of `req` alone takes (or the error encoding it).
    fn append_frame(req: &Request) -> std::io::Result<Vec<u8>> {
        let entry = Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(u64::MAX, u64::MAX), u64::MAX),
            payload: EntryPayload::Normal(req.clone()),
        };
        let last = Some(entry.log_id);
        wire::encode(&wire::Message::Append(
            openraft::raft::AppendEntriesRequest {
                vote: Vote::new_committed(u64::MAX, u64::MAX),
                prev_log_id: last,
                entries: vec![entry],
                leader_commit: last,
            },
        ))
    }

    #[test]
    fn memberships_are_bounded_in_nodes_and_address_length() {
        let addr = |n: usize| "a".repeat(n);
        let ok = addr(MAX_NODE_ADDR);
        assert!(membership_fits([ok.as_str(); MAX_MEMBERS]));
        assert!(!membership_fits([ok.as_str(); MAX_MEMBERS + 1]));
        assert!(!membership_fits([addr(MAX_NODE_ADDR + 1).as_str()]));
        assert!(membership_fits([]));
        // The largest membership, in a joint change (every address twice), fits a frame with
        // room to spare.
        let mut nodes = BTreeMap::new();
        for id in 0..MAX_MEMBERS as u64 {
            nodes.insert(id, BasicNode { addr: ok.clone() });
        }
        let json = serde_json::to_vec(&(&nodes, &nodes)).unwrap();
        assert!(json.len() < wire::MAX_FRAME / 16, "{}", json.len());
    }

    fn put(value: String) -> Request {
        Request::Put {
            key: "k".repeat(MAX_USER_KEY),
            value,
        }
    }

    /// The largest write `request_fits` lets through, its value made of `unit` (which JSON
    /// writes in `cost` bytes), does fit one frame; one character more is refused.
    fn the_largest_write_fits_one_frame(unit: &str, cost: usize) {
        let room = wire::MAX_FRAME - FRAME_ROOM - json_len(&"k".repeat(MAX_USER_KEY)) - 2;
        let largest = put(unit.repeat(room / cost));
        assert!(request_fits(&largest), "{unit:?}");
        assert!(append_frame(&largest).is_ok(), "{unit:?}");
        let over = put(unit.repeat(room / cost + 1));
        assert!(!request_fits(&over), "{unit:?}");
    }

    // One test per kind of character (a frame is 64 MiB of JSON to encode), so that the test
    // harness runs them side by side.
    #[test]
    fn the_largest_write_of_plain_characters_fits_one_frame() {
        the_largest_write_fits_one_frame("v", 1);
    }

    #[test]
    fn the_largest_write_of_quotes_fits_one_frame() {
        the_largest_write_fits_one_frame("\"", 2);
    }

    #[test]
    fn the_largest_write_of_control_characters_fits_one_frame() {
        the_largest_write_fits_one_frame("\u{1}", 6);
    }

    #[test]
    fn keys_too_long_and_unchecked_writes_too_large_for_a_frame_are_refused() {
        assert!(request_fits(&Request::Delete {
            key: "k".repeat(MAX_USER_KEY)
        }));
        assert!(!request_fits(&Request::Delete {
            key: "k".repeat(MAX_USER_KEY + 1)
        }));
        // With nothing to check the write, the frame would be refused.
        let unchecked = put("v".repeat(wire::MAX_FRAME));
        assert!(wire::is_too_big(&append_frame(&unchecked).unwrap_err()));
    }
}
