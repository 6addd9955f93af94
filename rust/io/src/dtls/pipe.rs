//! The in-memory datagram BIO each `SSL` runs on: the caller owns the UDP socket, OpenSSL sees only this.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

/// One end of a datagram pipe: each write is one datagram out, each read takes one datagram in or would block.
/// Public for tests and benchmarks, whose OpenSSL clients run on one too.
#[derive(Default)]
pub struct Pipe {
    /// Datagrams to be read, oldest first.
    pub inbox: VecDeque<Vec<u8>>,
    /// Datagrams written.
    pub outbox: Vec<Vec<u8>>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inbox.pop_front() {
            Some(datagram) => {
                let n = datagram.len().min(buf.len()); // longer than the buffer: truncated, as UDP does
                buf[..n].copy_from_slice(&datagram[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbox.push(buf.to_vec());
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
    fn each_read_takes_one_datagram_truncated_to_the_buffer_and_an_empty_pipe_would_block() {
        let mut pipe = Pipe::default();
        pipe.inbox.extend([b"first".to_vec(), b"second".to_vec()]);
        let mut buffer = [0u8; 3];
        assert_eq!(pipe.read(&mut buffer).unwrap(), 3);
        assert_eq!(&buffer, b"fir"); // the rest of "first" is gone, as with UDP
        assert_eq!(pipe.read(&mut buffer).unwrap(), 3);
        assert_eq!(&buffer, b"sec");
        let empty = pipe.read(&mut buffer).unwrap_err();
        assert_eq!(empty.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn each_write_is_one_datagram_out() {
        let mut pipe = Pipe::default();
        pipe.write_all(b"one").unwrap();
        pipe.write_all(b"two").unwrap();
        assert_eq!(pipe.outbox, [b"one".to_vec(), b"two".to_vec()]);
    }
}
