//! [`TcpNetwork`]: openraft's `RaftNetworkFactory` over the TCP frames of [`wire`]. One
//! connection per target node, opened on first use and again after any error; every call is
//! bounded by openraft's time-to-live for it.

use std::io;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::wire::{self, Message};
use crate::{NodeId, TypeConfig};

/// Makes a [`PeerClient`] per target node. Stateless.
#[derive(Clone, Debug, Default)]
pub struct TcpNetwork;

/// Sends Raft messages to one node over one TCP connection.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            conn: None,
        }
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl PeerClient {
    async fn exchange<R: DeserializeOwned>(&mut self, frame: &[u8]) -> io::Result<R> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr).await?;
            s.set_nodelay(true)?;
            self.conn = Some(s);
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.write_all(frame).await?;
        wire::read_frame(conn)
            .await?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"))
    }

    /// Sends `msg`, waits at most `ttl` for the reply, and maps the outcome onto openraft's
    /// errors: no connection is `Unreachable` (openraft backs off), a broken or slow exchange
    /// or a message that does not fit one frame is a `NetworkError`, an error the node
    /// answered is a `RemoteError`.
    async fn call<T, E>(&mut self, msg: Message, ttl: Duration) -> RpcResult<T, E>
    where
        T: DeserializeOwned,
        E: DeserializeOwned + std::error::Error,
    {
        let frame = wire::encode(&msg).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.send(&frame, ttl).await
    }

    /// [`call`](Self::call) with the message already encoded.
    async fn send<T, E>(&mut self, frame: &[u8], ttl: Duration) -> RpcResult<T, E>
    where
        T: DeserializeOwned,
        E: DeserializeOwned + std::error::Error,
    {
        let connected = self.conn.is_some();
        let res =
            tokio::time::timeout(ttl, self.exchange::<Result<T, RaftError<NodeId, E>>>(frame))
                .await;
        let res = match res {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no reply in time")),
        };
        match res {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(e) => {
                self.conn = None;
                if !connected && e.kind() == io::ErrorKind::ConnectionRefused {
                    Err(RPCError::Unreachable(Unreachable::new(&e)))
                } else {
                    Err(RPCError::Network(NetworkError::new(&e)))
                }
            }
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        // Entries that do not fit one frame together (each fits alone: see
        // `crate::request_fits`): openraft retries at once with at most the hinted number.
        let entries = rpc.entries.len() as u64;
        match wire::encode(&Message::Append(rpc)) {
            Ok(frame) => self.send(&frame, option.hard_ttl()).await,
            Err(e) if entries > 1 && wire::is_too_big(&e) => Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(entries / 2),
            )),
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Message::Snapshot(rpc), option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Message::Vote(rpc), option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

    /// An append of one put per value length.
    fn append(values: &[usize]) -> AppendEntriesRequest<TypeConfig> {
        let entry = |i: usize, n: usize| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
            payload: EntryPayload::Normal(Request::Put {
                key: format!("k{i}"),
                value: "v".repeat(n),
            }),
        };
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: values
                .iter()
                .enumerate()
                .map(|(i, &n)| entry(i, n))
                .collect(),
            leader_commit: None,
        }
    }

    /// A client for a node nobody listens for (port 1 refuses connections).
    fn peer() -> PeerClient {
        PeerClient {
            target: 2,
            addr: "127.0.0.1:1".into(),
            conn: None,
        }
    }

    fn option() -> RPCOption {
        RPCOption::new(Duration::from_secs(5))
    }

    /// Two entries that each fit a frame but not together: openraft is asked to send fewer
    /// (it retries at once), not told the network failed (it would resend the same batch).
    #[tokio::test]
    async fn entries_that_do_not_fit_one_frame_together_ask_openraft_for_fewer() {
        let big = 40 << 20;
        match peer()
            .append_entries(append(&[big, big, 10]), option())
            .await
        {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 1),
            other => panic!("expected PayloadTooLarge, got {:?}", other.err()),
        }
        // One entry alone over a frame: nothing fewer would help.
        match peer()
            .append_entries(append(&[wire::MAX_FRAME]), option())
            .await
        {
            Err(RPCError::Network(_)) => {}
            other => panic!("expected a network error, got {:?}", other.err()),
        }
        // Entries that fit are sent: here, to a port that refuses them.
        match peer().append_entries(append(&[10, 10]), option()).await {
            Err(RPCError::Unreachable(_)) => {}
            other => panic!("expected Unreachable, got {:?}", other.err()),
        }
    }
}
