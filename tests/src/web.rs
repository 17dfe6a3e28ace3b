//! Test support for the dashboard: a worker process serving it (on a port
//! the OS picks, read from the line it prints), a small HTTP/1.1 client with
//! a cookie, and headless Chromium driven over the DevTools protocol on a
//! pipe (`--remote-debugging-pipe`: JSON messages ending in NUL on fds 3
//! and 4, no websocket, no download).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{TempDir, bin, temp_dir};

/// A `test-worker` process serving the dashboard.
#[derive(Debug)]
pub struct Dashboard {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    _lines: std::thread::JoinHandle<()>,
}

impl Dashboard {
    /// Starts `test-worker -r <url> --namespace <ns> <args…>`, where `args`
    /// include `web --bind 127.0.0.1:0` or `run --web 127.0.0.1:0`, and waits
    /// for the line that names the dashboard's address.
    pub fn start(redis: &str, ns: &str, args: &[&str], env: &[(&str, &str)]) -> Dashboard {
        let mut cmd = Command::new(bin("test-worker"));
        cmd.arg("-r")
            .arg(redis)
            .arg("--namespace")
            .arg(ns)
            .args(args);
        cmd.env_remove("FAIRJOB_WEB_TOKEN").env_remove("REDIS_URL");
        cmd.env(
            "FAIRJOB_LOG",
            std::env::var("FAIRJOB_TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        );
        cmd.envs(env.iter().copied());
        cmd.stdout(Stdio::piped());
        if std::env::var_os("FAIRJOB_TEST_WORKER_STDERR").is_none() {
            cmd.stderr(Stdio::null());
        }
        let mut child = cmd.spawn().expect("test-worker starts");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        let lines = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("fairjob dashboard on ") {
                    let url = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .trim_end_matches('/');
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the worker prints the dashboard's address");
        Dashboard {
            child,
            url,
            _lines: lines,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl Resp {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A browser-less HTTP client with one cookie jar.
#[derive(Debug, Clone, Default)]
pub struct Http {
    /// Cookies set so far.
    pub cookies: HashMap<String, String>,
}

impl Http {
    /// A client without cookies.
    pub fn new() -> Http {
        Http::default()
    }

    /// `GET url`.
    pub fn get(&mut self, url: &str, headers: &[(&str, &str)]) -> Resp {
        self.send("GET", url, headers, "")
    }

    /// `POST url` with a form body.
    pub fn post(&mut self, url: &str, headers: &[(&str, &str)], form: &[(&str, &str)]) -> Resp {
        let body: Vec<String> = form
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect();
        let mut h = headers.to_vec();
        h.push(("content-type", "application/x-www-form-urlencoded"));
        self.send("POST", url, &h, &body.join("&"))
    }

    /// One request (HTTP/1.1, `Connection: close`).
    pub fn send(&mut self, method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        let rest = url.strip_prefix("http://").expect("http URL");
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let mut s = TcpStream::connect(host).expect("dashboard reachable");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {}\r\n",
            body.len()
        );
        if !self.cookies.is_empty() {
            let c: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req.push_str(&format!("cookie: {}\r\n", c.join("; ")));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).expect("request written");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("response read");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a header block");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut body = raw[split + 4..].to_vec();
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        if headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
        {
            body = dechunk(&body);
        }
        for (k, v) in &headers {
            if k == "set-cookie"
                && let Some((pair, _)) = v.split_once(';').or(Some((v.as_str(), "")))
                && let Some((name, value)) = pair.split_once('=')
            {
                if value.is_empty() || v.contains("Max-Age=0") {
                    self.cookies.remove(name.trim());
                } else {
                    self.cookies
                        .insert(name.trim().to_owned(), value.to_owned());
                }
            }
        }
        Resp {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
}

/// Percent-encodes a form value or URL component.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of the first `<input … name="<name>" value="…">` in `html`
/// (the CSRF token of a page's forms), HTML entities of quotes undone.
pub fn input_value(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    let end = rest.find('"')?;
    Some(rest[..end].replace("&quot;", "\"").replace("&amp;", "&"))
}

// ---------------------------------------------------------------------------
// Headless Chromium over the DevTools protocol on a pipe.

/// A headless Chromium with its own fresh profile (removed on drop).
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    /// Events seen (method, params), oldest first.
    pub events: Vec<(String, Value)>,
    _profile: TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("pid", &self.child.id())
            .finish()
    }
}

fn read_messages(mut out: ChildStdout, tx: mpsc::Sender<Value>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = match out.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.iter().position(|b| *b == 0) {
            let msg: Vec<u8> = buf.drain(..=end).collect();
            if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1])
                && tx.send(v).is_err()
            {
                return;
            }
        }
    }
}

impl Browser {
    /// Starts `chromium` headless (a window of `width`×`height`) and opens a tab.
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = temp_dir("chromium");
        let mut flags = vec![
            "--headless".to_owned(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            "--remote-debugging-pipe".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.display()),
        ];
        // As root, Chromium's sandbox cannot start.
        if Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
        {
            flags.push("--no-sandbox".into());
        }
        // fds 3 (commands in) and 4 (replies out) are the DevTools pipe.
        let script = format!(
            "exec chromium {} 3<&0 4>&1 0</dev/null 1>/dev/null",
            flags.join(" ")
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            // Chromium's own scratch files (its singleton socket) go into the
            // profile, removed with it.
            .env("TMPDIR", &*profile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts (apt-get install chromium)");
        let to = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || read_messages(out, tx));
        let mut b = Browser {
            child,
            to,
            from,
            next_id: 0,
            session: String::new(),
            events: Vec::new(),
            _profile: profile,
        };
        let target = b.call_browser("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("a target").to_owned();
        let attached = b.call_browser(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if session {
            msg["sessionId"] = Value::String(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .expect("command written to chromium");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium answers {method}"));
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method} failed: {e}");
                }
                return v["result"].clone();
            }
            if let Some(m) = v["method"].as_str() {
                self.events.push((m.to_owned(), v["params"].clone()));
            }
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    /// A command to the tab.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Waits up to `timeout` for an event of the tab named `method` after
    /// event number `after`; returns whether it came.
    pub fn wait_event(&mut self, method: &str, after: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.events[after.min(self.events.len())..]
                .iter()
                .any(|(m, _)| m == method)
            {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.from.recv_timeout(left) {
                Ok(v) => {
                    if let Some(m) = v["method"].as_str() {
                        self.events.push((m.to_owned(), v["params"].clone()));
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Opens `url` and waits for its load event.
    pub fn goto(&mut self, url: &str) {
        let mark = self.events.len();
        self.call("Page.navigate", json!({ "url": url }));
        assert!(
            self.wait_event("Page.loadEventFired", mark, Duration::from_secs(20)),
            "{url} loads"
        );
    }

    /// Evaluates `expr` in the page; returns its value.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        r["result"]["value"].clone()
    }

    /// A PNG screenshot of the viewport.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64")
    }

    /// Clicks the element `selector` names with real mouse events at its
    /// centre (scrolled into view first); waits for the navigation it causes.
    pub fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).expect("json");
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        let (x, y) = (
            at[0]
                .as_f64()
                .unwrap_or_else(|| panic!("no element {selector}")),
            at[1].as_f64().expect("y"),
        );
        let mark = self.events.len();
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            );
        }
        assert!(
            self.wait_event("Page.loadEventFired", mark, Duration::from_secs(20)),
            "clicking {selector} loads a page"
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call_browser_quiet();
        // Let it close itself (it cleans up its files); kill it otherwise.
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn call_browser_quiet(&mut self) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(&json!({ "id": 999_999, "method": "Browser.close" }))?;
        bytes.push(0);
        self.to.write_all(&bytes)?;
        Ok(())
    }
}

/// Whether a PNG shows something: decodes it and counts distinct colours
/// (a blank page has one or two).
pub fn png_colours(png_bytes: &[u8]) -> usize {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let step = info.color_type.samples();
    let mut seen = std::collections::HashSet::new();
    for px in buf[..info.buffer_size()].chunks(step) {
        seen.insert(px.to_vec());
        if seen.len() > 1_000 {
            break;
        }
    }
    seen.len()
}
