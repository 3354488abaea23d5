//! [`Client`]: a blocking client of a siltdb-raft cluster that finds the leader itself.
//!
//! Writes and linearizable reads go to the leader: a node that is not the leader answers
//! with the leader's address, and the client follows it; a node that does not answer is
//! skipped for the next one in the list. A request is retried until it gets an answer or
//! its deadline passes. A write whose connection broke after it was sent may have been
//! committed, so a retried write can apply twice: puts and deletes are idempotent.

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crate::wire::{self, ClientReply, ClientRequest, Message, NodeStatus};
use crate::Error;

/// A client of a cluster, given the addresses of some of its nodes.
pub struct Client {
    addrs: Vec<String>,
    leader: Option<String>,
    next: usize,
    conns: HashMap<String, TcpStream>,
    timeout: Duration,
}

impl Client {
    /// A client of the cluster whose nodes listen at `addrs`. Requests time out after 10 s
    /// (see [`Client::timeout`]).
    pub fn new<S: Into<String>>(addrs: impl IntoIterator<Item = S>) -> Client {
        Client {
            addrs: addrs.into_iter().map(Into::into).collect(),
            leader: None,
            next: 0,
            conns: HashMap::new(),
            timeout: Duration::from_secs(10),
        }
    }

    /// How long one request may take, retries included. Default 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Replicates `key = value`; returns its log index once it is committed (on a majority's
    /// disk, synced).
    ///
    /// Errors: [`Error::InvalidArgument`] if the client has no node addresses;
    /// [`Error::Unavailable`] if no leader accepted it in time (it may still have been
    /// committed; a node that does not answer or whose address does not resolve is skipped
    /// until then); [`Error::Remote`] if the leader refused it.
    pub fn put(&mut self, key: &str, value: &str) -> Result<u64, Error> {
        self.write(ClientRequest::Put {
            key: key.into(),
            value: value.into(),
        })
    }

    /// Replicates the removal of `key`; returns its log index once committed. Errors: as
    /// [`Client::put`].
    pub fn delete(&mut self, key: &str) -> Result<u64, Error> {
        self.write(ClientRequest::Delete { key: key.into() })
    }

    /// A linearizable read of `key` through the leader. Errors: as [`Client::put`].
    pub fn read(&mut self, key: &str) -> Result<Option<String>, Error> {
        match self.request(ClientRequest::Get {
            key: key.into(),
            linearizable: true,
        })? {
            ClientReply::Value(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    /// Reads `key` from the state machine of the node at `addr` (not linearizable: as fresh as
    /// what that node has applied), over this client's cached connection to it.
    ///
    /// Errors: [`Error::Io`] if the node cannot be reached, [`Error::Remote`] if it failed.
    pub fn get_local(&mut self, addr: &str, key: &str) -> Result<Option<String>, Error> {
        let req = ClientRequest::Get {
            key: key.into(),
            linearizable: false,
        };
        match self.call_cached(addr, &req, self.timeout)? {
            ClientReply::Value(v) => Ok(v),
            ClientReply::Error(e) => Err(Error::Remote(e)),
            other => Err(unexpected(other)),
        }
    }

    fn write(&mut self, req: ClientRequest) -> Result<u64, Error> {
        match self.request(req)? {
            ClientReply::Written { index } => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    /// Sends `req` to the leader, following redirects and skipping nodes that do not answer,
    /// until an answer other than "not the leader" comes or the deadline passes.
    ///
    /// Errors: [`Error::InvalidArgument`] if the client has no node addresses;
    /// [`Error::Unavailable`] when the deadline passes; [`Error::Remote`] when the leader
    /// answered with an error.
    pub fn request(&mut self, req: ClientRequest) -> Result<ClientReply, Error> {
        if self.addrs.is_empty() {
            return Err(Error::InvalidArgument("no node addresses".into()));
        }
        let deadline = crate::deadline_after(self.timeout);
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            let addr = match &self.leader {
                Some(a) => a.clone(),
                None => {
                    self.next = (self.next + 1) % self.addrs.len();
                    self.addrs[self.next].clone()
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            match self.call_cached(&addr, &req, left) {
                Ok(ClientReply::NotLeader { addr: Some(a), .. }) if a != addr => {
                    self.leader = Some(a);
                }
                Ok(ClientReply::NotLeader { .. }) => {
                    last = format!("{addr} knows no leader");
                    self.leader = None;
                    thread::sleep(Duration::from_millis(50));
                }
                Ok(ClientReply::Error(e)) => return Err(Error::Remote(e)),
                Ok(reply) => {
                    self.leader = Some(addr);
                    return Ok(reply);
                }
                Err(e) => {
                    last = format!("{addr}: {e}");
                    self.leader = None;
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Err(Error::Unavailable(format!(
            "no answer in {:?}: {last}",
            self.timeout
        )))
    }

    fn call_cached(
        &mut self,
        addr: &str,
        req: &ClientRequest,
        timeout: Duration,
    ) -> Result<ClientReply, Error> {
        let timeout = timeout.max(Duration::from_millis(10));
        let conn = match self.conns.remove(addr) {
            Some(c) => c,
            None => connect(addr, timeout)?,
        };
        conn.set_read_timeout(Some(timeout))?;
        // A large request to a node that stopped reading would otherwise block in `write`
        // until TCP gives up (minutes), past the deadline.
        conn.set_write_timeout(Some(timeout))?;
        let mut conn = conn;
        let reply = wire::call_blocking(&mut conn, &Message::Client(req.clone()))?;
        self.conns.insert(addr.to_string(), conn);
        Ok(reply)
    }
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, Error> {
    let sa = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("{addr} resolves to no address")))?;
    let s = TcpStream::connect_timeout(&sa, timeout)?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn unexpected(reply: ClientReply) -> Error {
    Error::Remote(format!("unexpected reply {reply:?}"))
}

/// Sends one request to the node at `addr` and returns its answer, whatever it is (no
/// redirect, no retry). For local reads, status and operator requests.
///
/// Errors: [`Error::Io`] if the node cannot be reached or does not answer within `timeout`
/// (a zero `timeout` always fails so); [`Error::InvalidArgument`] if `addr` resolves to no
/// address.
pub fn call(addr: &str, req: ClientRequest, timeout: Duration) -> Result<ClientReply, Error> {
    let mut conn = connect(addr, timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(wire::call_blocking(&mut conn, &Message::Client(req))?)
}

/// The state of the node at `addr`. Errors: as [`call`], and [`Error::Remote`] if the node
/// answers with anything but its status.
pub fn status(addr: &str) -> Result<NodeStatus, Error> {
    match call(addr, ClientRequest::Status, Duration::from_secs(5))? {
        ClientReply::Status(s) => Ok(s),
        other => Err(unexpected(other)),
    }
}

/// Reads `key` from the node at `addr`'s own state machine (not linearizable: as fresh as
/// what that node has applied). Errors: as [`call`], and [`Error::Remote`] if the node
/// answers with an error or anything but a value.
pub fn get_local(addr: &str, key: &str) -> Result<Option<String>, Error> {
    match call(
        addr,
        ClientRequest::Get {
            key: key.into(),
            linearizable: false,
        },
        Duration::from_secs(5),
    )? {
        ClientReply::Value(v) => Ok(v),
        ClientReply::Error(e) => Err(Error::Remote(e)),
        other => Err(unexpected(other)),
    }
}
