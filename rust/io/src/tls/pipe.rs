//! The in-memory byte-stream BIO a TLS `SSL` runs on: the caller owns the TCP connection, OpenSSL sees only this.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

/// One end of a byte pipe: reads take what was received, in order, or would block; writes gather what to send.
#[derive(Default)]
pub struct StreamPipe {
    /// Bytes received and not read yet.
    pub inbox: VecDeque<u8>,
    /// Bytes written, to be sent.
    pub outbox: Vec<u8>,
}

impl Read for StreamPipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.inbox.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.inbox.read(buf)
    }
}

impl Write for StreamPipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbox.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_take_bytes_across_writes_in_order_and_an_empty_pipe_would_block() {
        let mut pipe = StreamPipe::default();
        pipe.inbox.extend(b"first");
        pipe.inbox.extend(b"second");
        let mut buffer = [0u8; 7];
        assert_eq!(pipe.read(&mut buffer).unwrap(), 7);
        assert_eq!(&buffer, b"firstse");
        assert_eq!(pipe.read(&mut buffer).unwrap(), 4);
        assert_eq!(&buffer[..4], b"cond");
        let empty = pipe.read(&mut buffer).unwrap_err();
        assert_eq!(empty.kind(), io::ErrorKind::WouldBlock);
    }
}
