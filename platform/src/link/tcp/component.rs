//! The TCP transport as a component (`"tcp"`): reaches any host; its
//! address is the rank's listener (`ip:port`, as text).

use super::{TcpNode, TcpOptions};
use crate::error::{HcclError, Result};
use crate::link::{LinkHandle, ParkHook};
use crate::mem::MemKind;
use crate::sync::Arc;
use crate::transport::{
    Capabilities, ContextSetup, PeerInfo, Reach, ScoreMap, Transport, TransportContext,
};
use std::net::SocketAddr;
use std::time::Duration;

/// The TCP component.
#[derive(Debug)]
pub struct TcpTransport;

/// Default score: the fallback that always works.
pub const TCP_SCORE: u32 = 10;

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reach: Reach::AnyHost,
            board_memory: false,
            maps_peer_memory: false,
            reads_peer_buffers: false,
            one_sided: false,
            registered_memory: false,
        }
    }

    fn default_scores(&self) -> ScoreMap {
        ScoreMap::uniform(TCP_SCORE)
    }

    fn open(
        &self,
        setup: &ContextSetup,
        _explicit: bool,
    ) -> Result<Option<Arc<dyn TransportContext>>> {
        let options = TcpOptions {
            io_timeout: setup.io_timeout,
            sockets_per_link: setup.sockets_per_link,
            link_timeout: link_timeout(&setup.params)?,
        };
        let node = TcpNode::start_with(
            setup.rank,
            setup.unique_id,
            SocketAddr::new(setup.ip, setup.port),
            setup.device.waker(),
            options,
            &[
                (MemKind::CclInput, setup.ccl.0.clone()),
                (MemKind::CclOutput, setup.ccl.1.clone()),
            ],
        )?;
        Ok(Some(Arc::new(TcpContext {
            ccl_len: setup.ccl.0.len(),
            node,
        })))
    }
}

/// A TCP address as the component publishes it.
pub fn encode_tcp_address(addr: SocketAddr) -> Vec<u8> {
    addr.to_string().into_bytes()
}

/// A published TCP address, checked.
pub fn decode_tcp_address(bytes: &[u8]) -> Result<SocketAddr> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            HcclError::para(format!(
                "malformed TCP address '{}'",
                String::from_utf8_lossy(bytes)
            ))
        })
}

#[derive(Debug)]
struct TcpContext {
    node: TcpNode,
    ccl_len: usize,
}

impl TransportContext for TcpContext {
    fn address(&self) -> Vec<u8> {
        encode_tcp_address(self.node.addr())
    }

    fn can_connect(&self, peer: &PeerInfo<'_>) -> bool {
        peer.address.is_some_and(|a| decode_tcp_address(a).is_ok())
    }

    fn connect(&self, peer: &PeerInfo<'_>, timeout: Duration) -> Result<LinkHandle> {
        let addr = decode_tcp_address(peer.address.unwrap_or_default())?;
        // every rank's CCL buffers have one size (checked at formation)
        let mut lens = [None; 5];
        lens[MemKind::CclInput.index()] = Some(self.ccl_len);
        lens[MemKind::CclOutput.index()] = Some(self.ccl_len);
        let link = self
            .node
            .link(peer.rank, addr, lens, timeout)?
            .with_peer_host(format!("{} at {}", peer.host, addr.ip()));
        Ok(LinkHandle::new(Arc::new(link)))
    }

    fn park_hook(&self) -> Option<Arc<dyn ParkHook>> {
        Some(self.node.park_hook())
    }

    fn listener(&self) -> Option<SocketAddr> {
        Some(self.node.addr())
    }
}

/// `HCCL_RS_TCP_LINK_TIMEOUT_MS`: milliseconds data may stay
/// unacknowledged before a link counts as dropped (0: the kernel's
/// default); unset: [`DEFAULT_LINK_TIMEOUT`](super::DEFAULT_LINK_TIMEOUT).
fn link_timeout(params: &crate::transport::TransportParams) -> Result<Option<Duration>> {
    const VAR: &str = "HCCL_RS_TCP_LINK_TIMEOUT_MS";
    let Some(v) = params.get(VAR) else {
        return Ok(Some(super::DEFAULT_LINK_TIMEOUT));
    };
    let ms: u64 = v.trim().parse().map_err(|_| {
        HcclError::para(format!(
            "environment variable {VAR}='{v}' is invalid: expected milliseconds (0 = the kernel's default)"
        ))
    })?;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}
