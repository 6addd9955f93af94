//! Batched UDP I/O on a socket the caller owns: `sendmmsg` and `recvmmsg` (Linux), so that the datagrams
//! one event-loop turn produces (or finds waiting) cost one system call instead of one each.
//!
//! Non-blocking: a full send buffer (or an empty receive queue) ends the batch early and the count says how
//! far it got; the caller keeps the rest (its own non-blocking transport queues them as before).

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// At most this many datagrams go to one `sendmmsg`/`recvmmsg` call (the kernel's UIO_MAXIOV is 1024).
pub const MAX_BATCH: usize = 1024;

/// A `sockaddr_in`/`sockaddr_in6` built from a `SocketAddr`, and its length.
fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (unspecified) value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr type.
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: v6.ip().octets(),
            };
            sin6.sin6_scope_id = v6.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The `SocketAddr` in a `sockaddr_storage` the kernel filled; None for a family other than IPv4/IPv6.
fn from_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sends `datagrams` (payload, destination) on `fd` with as few `sendmmsg` calls as it takes, without blocking.
/// Returns how many went out in order from the first: fewer than all when the socket would block
/// (`EAGAIN`) after the first; an error when the very first could not be sent (`EAGAIN` included).
pub fn send_batch(fd: RawFd, datagrams: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < datagrams.len() {
        let chunk = &datagrams[sent..(sent + MAX_BATCH).min(datagrams.len())];
        let mut addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
            chunk.iter().map(|(_, a)| to_sockaddr(a)).collect();
        let mut iovs: Vec<libc::iovec> = chunk
            .iter()
            .map(|(data, _)| libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .zip(addrs.iter_mut())
            .map(|(iov, (storage, len))| {
                // SAFETY: msghdr is plain old data; the fields that matter are set below.
                let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
                hdr.msg_name = storage as *mut _ as *mut libc::c_void;
                hdr.msg_namelen = *len;
                hdr.msg_iov = iov as *mut libc::iovec;
                hdr.msg_iovlen = 1;
                libc::mmsghdr {
                    msg_hdr: hdr,
                    msg_len: 0,
                }
            })
            .collect();
        // SAFETY: headers, iovecs and addresses live until the call returns; the payloads are borrowed.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                headers.as_mut_ptr(),
                headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return if sent > 0 { Ok(sent) } else { Err(error) };
        }
        sent += n as usize;
        if (n as usize) < chunk.len() {
            break; // the kernel stopped early (a full buffer, or an error it reports on the next call)
        }
    }
    Ok(sent)
}

/// Buffers for `recvmmsg`, allocated once and reused by every call: `max` datagrams of up to `size` bytes each.
/// A datagram longer than `size` is cut to `size` bytes: size it one more than the largest datagram accepted
/// to recognise one too long.
pub struct Receiver {
    size: usize,
    buffers: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    count: usize,
}

impl Receiver {
    /// Room for `max` (1..=MAX_BATCH) datagrams of `size` (at least 1) bytes each.
    pub fn new(max: usize, size: usize) -> Self {
        let max = max.clamp(1, MAX_BATCH);
        let size = size.max(1);
        Self {
            size,
            buffers: vec![0u8; max * size],
            // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (unspecified) value.
            addrs: vec![unsafe { mem::zeroed() }; max],
            lens: vec![0; max],
            count: 0,
        }
    }

    /// How many datagrams one call takes at most.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Takes the datagrams waiting on `fd`, up to the capacity, in one `recvmmsg` call without blocking, and
    /// returns how many (0 when none waits; what an earlier call took is gone). An error is the socket's (an
    /// ICMP error the kernel queued, a closed descriptor); with `IP_RECVERR` set, the error queue is emptied
    /// too, or a level-triggered poll would keep reporting the socket readable.
    pub fn receive(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        let size = self.size;
        let mut iovs: Vec<libc::iovec> = self
            .buffers
            .chunks_mut(size)
            .map(|buf| libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .zip(self.addrs.iter_mut())
            .map(|(iov, storage)| {
                // SAFETY: as in send_batch.
                let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
                hdr.msg_name = storage as *mut _ as *mut libc::c_void;
                hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                hdr.msg_iov = iov as *mut libc::iovec;
                hdr.msg_iovlen = 1;
                libc::mmsghdr {
                    msg_hdr: hdr,
                    msg_len: 0,
                }
            })
            .collect();
        let n = loop {
            // SAFETY: every header points at a live buffer and address of this receiver.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    headers.as_mut_ptr(),
                    headers.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => {
                    drain_error_queue(fd);
                    return Err(error);
                }
            }
        };
        for (len, header) in self.lens.iter_mut().zip(&headers[..n]) {
            *len = header.msg_len as usize;
        }
        self.count = n;
        Ok(n)
    }

    /// The `i`-th datagram of the last `receive` and its sender (None for a family other than IPv4/IPv6).
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.count {
            return None;
        }
        let start = i * self.size;
        let addr = from_sockaddr(&self.addrs[i])?;
        Some((&self.buffers[start..start + self.lens[i]], addr))
    }

    /// The datagrams of the last `receive`, in the order they came, each with its sender.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], SocketAddr)> + '_ {
        (0..self.count).filter_map(|i| self.get(i))
    }
}

/// Empties the socket's error queue (filled only with `IP_RECVERR`/`IPV6_RECVERR` set), without blocking.
fn drain_error_queue(fd: RawFd) {
    let mut buf = [0u8; 512];
    let mut control = [0u8; 512];
    for _ in 0..MAX_BATCH {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain old data; it points at the local buffers above for the call's duration.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        hdr.msg_controllen = control.len() as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(fd, &mut hdr, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return;
        }
    }
}

/// Receives up to `max` waiting datagrams from `fd` in one `recvmmsg` call, without blocking, each with its
/// sender; an empty vector when none is waiting. A datagram longer than `size` is cut to `size` bytes: pass one
/// more than the largest datagram accepted to recognise one too long. (A `Receiver` kept across calls saves
/// the allocation.)
pub fn recv_batch(fd: RawFd, max: usize, size: usize) -> io::Result<Vec<(Vec<u8>, SocketAddr)>> {
    let mut receiver = Receiver::new(max, size);
    receiver.receive(fd)?;
    Ok(receiver
        .datagrams()
        .map(|(data, addr)| (data.to_vec(), addr))
        .collect())
}

#[cfg(test)]
mod tests;
