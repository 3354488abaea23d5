//! [`TcpNetwork`]: openraft's `RaftNetworkFactory` over the TCP frames of [`wire`]. One
//! connection per target node, opened on first use and again after any error; every call is
//! bounded by openraft's time-to-live for it.

use std::io;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
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
    async fn exchange<R: DeserializeOwned>(&mut self, msg: &Message) -> io::Result<R> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr).await?;
            s.set_nodelay(true)?;
            self.conn = Some(s);
        }
        let conn = self.conn.as_mut().expect("connected above");
        wire::write_frame(conn, msg).await?;
        wire::read_frame(conn)
            .await?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"))
    }

    /// Sends `msg`, waits at most `ttl` for the reply, and maps the outcome onto openraft's
    /// errors: no connection is `Unreachable` (openraft backs off), a broken or slow exchange
    /// is a `NetworkError`, an error the node answered is a `RemoteError`.
    async fn call<T, E>(&mut self, msg: Message, ttl: Duration) -> RpcResult<T, E>
    where
        T: DeserializeOwned,
        E: DeserializeOwned + std::error::Error,
    {
        let connected = self.conn.is_some();
        let res =
            tokio::time::timeout(ttl, self.exchange::<Result<T, RaftError<NodeId, E>>>(&msg)).await;
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
        self.call(Message::Append(rpc), option.hard_ttl()).await
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
