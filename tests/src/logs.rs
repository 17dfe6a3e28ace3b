//! What this test process logs at warn and above, kept in memory for tests
//! that read the worker's warnings (an in-process worker logs through the
//! process's global subscriber).

use std::sync::Mutex;

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (warn and above, no colour) as the
/// process's global one; later calls keep the first.
pub fn capture() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(|| LogWriter)
        .try_init();
}

/// How many bytes have been logged so far (an offset for [`since`]).
pub fn len() -> usize {
    LOG.lock().unwrap().len()
}

/// Everything logged from byte `offset` on.
pub fn since(offset: usize) -> String {
    let log = LOG.lock().unwrap();
    String::from_utf8_lossy(&log[offset.min(log.len())..]).into_owned()
}
