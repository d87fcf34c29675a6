//! A real browser for the web interface's tests: Debian's headless Chromium, driven
//! through `chromedriver` by the W3C WebDriver protocol (JSON over HTTP on
//! 127.0.0.1), with the few commands the tests use.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// A browser session; the browser and its driver stop when it is dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

/// An element of the page, by its WebDriver reference.
#[derive(Debug, Clone)]
pub struct Element(String);

const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where `chromedriver` is, if installed.
fn driver_path() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromedriver"))
            .find(|p| p.is_file())
    })
}

impl Browser {
    /// A headless Chromium window of `width` x `height`, trusting any certificate
    /// (the service's is self-signed; the tests pin nothing through the browser).
    /// `None`, saying SKIPPED, where `chromedriver` is not installed (a failure where
    /// `HETCH_REQUIRE_ALL` is set: [`super::skipped`]).
    pub fn start(width: u32, height: u32) -> Option<Browser> {
        let Some(path) = driver_path() else {
            super::skipped("chromedriver not found (apt-get install chromium chromium-driver)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let driver = Command::new(path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while b.raw("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                format!("--window-size={width},{height}"),
            ]},
        }}});
        let v = b.raw("POST", "/session", Some(caps)).expect("new session");
        b.session = v["sessionId"].as_str().expect("session id").to_string();
        Some(b)
    }

    /// One WebDriver call: the answer's `value`, or its error message.
    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(120))).ok();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open: read the head, then Content-Length.
        let mut answer = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        let (head_end, length) = loop {
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed before the answer".into());
            }
            answer.extend_from_slice(&buf[..n]);
            if let Some(i) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&answer[..i]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or("no Content-Length")?;
                break (i + 4, length);
            }
        };
        while answer.len() < head_end + length {
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed mid-answer".into());
            }
            answer.extend_from_slice(&buf[..n]);
        }
        let json = &answer[head_end..head_end + length];
        let v: Value = serde_json::from_slice(json)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(json)))?;
        let value = v["value"].clone();
        match value.get("error") {
            Some(kind) => Err(format!("{kind}: {}", value["message"])),
            None => Ok(value),
        }
    }

    /// A call in this session, which must succeed.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let full = format!("/session/{}{path}", self.session);
        self.raw(method, &full, body)
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"))
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The page's URL now.
    pub fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The elements matching CSS selector `css` now.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let body = json!({"using": "css selector", "value": css});
        let v = self.call("POST", "/elements", Some(body));
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some(Element(e[ELEMENT_KEY].as_str()?.to_string())))
            .collect()
    }

    /// The first element matching `css`, waiting for it to appear.
    pub fn find(&self, css: &str) -> Element {
        let mut found = None;
        self.wait(&format!("an element {css}"), || {
            found = self.find_all(css).into_iter().next();
            found.is_some()
        });
        found.unwrap()
    }

    /// Clicks `e`.
    pub fn click(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Types `text` into `e` (after clearing it).
    pub fn type_into(&self, e: &Element, text: &str) {
        self.call("POST", &format!("/element/{}/clear", e.0), Some(json!({})));
        self.call(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    /// `e`'s rendered text.
    pub fn text(&self, e: &Element) -> String {
        let v = self.call("GET", &format!("/element/{}/text", e.0), None);
        v.as_str().unwrap_or_default().to_string()
    }

    /// The text of the first element matching `css` now ("" when there is none);
    /// read in one step, so a page rebuilding itself cannot make it stale.
    pub fn text_of(&self, css: &str) -> String {
        let script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''";
        let v = self.run(script, vec![json!(css)]);
        v.as_str().unwrap_or_default().to_string()
    }

    /// Clicks the first element matching `css`, finding it again if the page rebuilt
    /// it between finding and clicking.
    pub fn click_on(&self, css: &str) {
        for _ in 0..50 {
            let e = self.find(css);
            let path = format!("/session/{}/element/{}/click", self.session, e.0);
            match self.raw("POST", &path, Some(json!({}))) {
                Ok(_) => return,
                Err(err) if err.contains("stale element") => continue,
                Err(err) => panic!("click {css}: {err}"),
            }
        }
        panic!("{css} kept going stale");
    }

    /// Runs `script` (a function body) in the page with `args`; its result.
    pub fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Sends `key` (a WebDriver key code, e.g. "\u{E004}" for Tab) to the page.
    pub fn press(&self, key: &str) {
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.call("POST", "/actions", Some(actions));
    }

    /// Runs Chrome DevTools command `cmd` (e.g. to emulate dark mode).
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        let body = json!({"cmd": cmd, "params": params});
        self.call("POST", "/goog/cdp/execute", Some(body))
    }

    /// Resizes the window.
    pub fn resize(&self, width: u32, height: u32) {
        let rect = json!({"width": width, "height": height});
        self.call("POST", "/window/rect", Some(rect));
    }

    /// Saves a screenshot of the page as PNG at `path`.
    pub fn screenshot(&self, path: &Path) {
        let v = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("screenshot"))
            .expect("base64");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Waits (up to two minutes) until `cond` holds, naming `what` if it never does.
    pub fn wait(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !cond() {
            if Instant::now() > deadline {
                let page = self.run(
                    "return document.body ? document.body.innerText : ''",
                    vec![],
                );
                panic!("waited two minutes for {what}; the page says: {page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.raw("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
