//! The TCP protocol between nodes and between a client and a node: length-prefixed JSON
//! frames on one connection, one request then one reply, in turn.
//!
//! A frame is a 4-byte big-endian length `n` (at most [`MAX_FRAME`]) followed by `n` bytes of
//! JSON. A request is a [`Message`]; the reply's type depends on the request: for Raft
//! messages `Result<openraft reply, openraft RaftError>`, for client requests a
//! [`ClientReply`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{NodeId, TypeConfig};

/// The largest frame either side accepts: 64 MiB (openraft sends snapshots in chunks of at
/// most 3 MiB by default, which JSON makes at most ~12 MiB).
pub const MAX_FRAME: usize = 64 << 20;

/// A request to a node.
#[derive(Debug, Serialize, Deserialize)]
pub enum Message {
    /// Raft: append entries (and heartbeats), from the leader.
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft: a vote request, from a candidate.
    Vote(VoteRequest<NodeId>),
    /// Raft: a chunk of a snapshot, from the leader.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client request.
    Client(ClientRequest),
}

/// What a client can ask a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Replicate `key = value`; answered [`ClientReply::Written`] once committed on a majority
    /// and applied on the leader.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Replicate the removal of `key`.
    Delete {
        /// The key.
        key: String,
    },
    /// Read `key`. `linearizable`: through the leader, after confirming leadership with a
    /// quorum and waiting until everything committed before the read is applied; otherwise
    /// from this node's state machine as it is.
    Get {
        /// The key.
        key: String,
        /// Linearizable (leader) read or local read.
        linearizable: bool,
    },
    /// This node's state: [`ClientReply::Status`].
    Status,
    /// Initialise a new cluster with these voters (id to address). Only on a fresh node.
    Init {
        /// The voters.
        members: BTreeMap<NodeId, String>,
    },
    /// Add a non-voting learner (leader only); returns once it has caught up.
    AddLearner {
        /// Its id.
        id: NodeId,
        /// Its address.
        addr: String,
    },
    /// Make exactly these nodes the voters (leader only).
    ChangeMembership {
        /// The new voters, which must already be members or learners.
        voters: BTreeSet<NodeId>,
    },
    /// Build a snapshot now and purge the log up to it (any node; for operators and tests).
    SnapshotAndPurge,
}

/// A node's state, as [`ClientRequest::Status`] returns it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's id.
    pub id: NodeId,
    /// `Leader`, `Follower`, `Candidate` or `Learner`.
    pub state: String,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The leader's address, when known.
    pub leader_addr: Option<String>,
    /// The index of the last entry in this node's log.
    pub last_log_index: Option<u64>,
    /// The index of the last applied entry.
    pub last_applied: Option<u64>,
    /// The index the current snapshot covers up to.
    pub snapshot: Option<u64>,
    /// The index up to which the log has been purged.
    pub purged: Option<u64>,
    /// The voters of the current membership.
    pub voters: Vec<NodeId>,
    /// WAL fsyncs of this node's database since it opened (siltdb `Stats::wal_syncs`).
    pub wal_syncs: u64,
    /// Write groups of this node's database since it opened (siltdb `Stats::write_groups`).
    pub write_groups: u64,
}

/// A node's answer to a [`ClientRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientReply {
    /// The write is committed (on a majority's disk, synced) and applied on the leader, at
    /// this log index.
    Written {
        /// The entry's log index.
        index: u64,
    },
    /// A read's answer.
    Value(Option<String>),
    /// The request was carried out.
    Done,
    /// The node's state.
    Status(NodeStatus),
    /// This node is not the leader; ask `leader` at `addr` if known.
    NotLeader {
        /// The leader's id, if known.
        leader: Option<NodeId>,
        /// The leader's address, if known.
        addr: Option<String>,
    },
    /// The request failed on the node.
    Error(String),
}

/// The error inside the [`io::Error`] (of kind `InvalidData`) for a frame over
/// [`MAX_FRAME`] bytes, sent or received: holds its length (for one being encoded, the
/// length reached when the encoding stopped).
#[derive(Debug)]
pub struct FrameTooBig(pub usize);

impl std::fmt::Display for FrameTooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "frame of {} bytes or more is over the {MAX_FRAME}-byte limit",
            self.0
        )
    }
}

impl std::error::Error for FrameTooBig {}

fn too_big(n: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, FrameTooBig(n))
}

/// True if `e` is a frame over [`MAX_FRAME`] bytes.
pub fn is_too_big(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<FrameTooBig>())
}

/// Encodes `msg` as one frame: the length, then the JSON. The encoding stops as soon as it
/// passes [`MAX_FRAME`] bytes, so a message too large to send (an append of many large
/// entries) costs no more memory than a frame.
///
/// Errors: `InvalidData` holding [`FrameTooBig`] if the JSON is over [`MAX_FRAME`] bytes
/// (see [`is_too_big`]); `InvalidData` too (without it) if `msg` does not serialise.
pub fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut out = Capped(vec![0; 4]);
    serde_json::to_writer(&mut out, msg).map_err(io::Error::from)?;
    let mut out = out.0;
    let body = (out.len() - 4) as u32; // at most MAX_FRAME: Capped refused more
    out[..4].copy_from_slice(&body.to_be_bytes());
    Ok(out)
}

/// A frame being encoded: its 4-byte length, then at most [`MAX_FRAME`] bytes of JSON.
struct Capped(Vec<u8>);

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = self.0.len() - 4 + buf.len();
        if body > MAX_FRAME {
            return Err(too_big(body));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Writes one frame holding `msg` (async).
///
/// Errors: as [`encode`], and the stream's own.
pub async fn write_frame<W: AsyncWriteExt + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> io::Result<()> {
    w.write_all(&encode(msg)?).await
}

/// Reads one frame and decodes it (async). `Ok(None)` if the stream ends before a frame's
/// 4-byte length is whole (a clean end, or one inside the length).
///
/// Errors: `InvalidData` for a length over [`MAX_FRAME`] (holding [`FrameTooBig`]) or a
/// body that does not decode as `T`; `UnexpectedEof` for a body cut short; the stream's own.
pub async fn read_frame<R: AsyncReadExt + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(too_big(n));
    }
    // Grow the buffer as bytes arrive rather than trusting the length up front.
    let mut body = Vec::new();
    r.take(n as u64).read_to_end(&mut body).await?;
    if body.len() != n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "frame cut short",
        ));
    }
    decode(&body).map(Some)
}

/// Sends `msg` and reads the reply (blocking; for the client).
///
/// Errors: as [`encode`] and [`read_frame`] (a reply cut inside its length is
/// `UnexpectedEof` here), and the stream's own (a timeout is `WouldBlock` or `TimedOut`).
pub fn call_blocking<S: Read + Write, Req: Serialize, Rep: DeserializeOwned>(
    s: &mut S,
    msg: &Req,
) -> io::Result<Rep> {
    s.write_all(&encode(msg)?)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(too_big(n));
    }
    let mut body = Vec::new();
    s.take(n as u64).read_to_end(&mut body)?;
    if body.len() != n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "frame cut short",
        ));
    }
    decode(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_or_garbled_frames_are_errors() {
        let msg = Message::Client(ClientRequest::Put {
            key: "k".into(),
            value: "v".into(),
        });
        let bytes = encode(&msg).unwrap();
        let mut r = &bytes[..];
        let back: Message = read_frame(&mut r).await.unwrap().unwrap();
        assert!(matches!(back, Message::Client(ClientRequest::Put { key, .. }) if key == "k"));
        let mut empty: &[u8] = &[];
        assert!(read_frame::<_, Message>(&mut empty)
            .await
            .unwrap()
            .is_none());

        let mut huge = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        let e = read_frame::<_, Message>(&mut &huge[..]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);

        let mut garbled = 3u32.to_be_bytes().to_vec();
        garbled.extend_from_slice(b"{x}");
        let e = read_frame::<_, Message>(&mut &garbled[..])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);

        let cut = &bytes[..bytes.len() - 1];
        assert!(read_frame::<_, Message>(&mut &cut[..]).await.is_err());
    }
}
