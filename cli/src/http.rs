//! A small HTTP/1.1 client for the coordinator's REST API (JSON in, JSON
//! out, one request per connection).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A reply: status code and parsed JSON body.
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
}

/// Call `method path` on the coordinator at `url` (`http://host:port`).
pub fn call(
    url: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Reply, String> {
    let host = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("coordinator URL '{url}' must start with http://"))?
        .trim_end_matches('/');
    let unreachable = |e: std::io::Error| {
        format!("cannot reach the coordinator at {url}: {e} (is `weir coordinator` running?)")
    };
    let addrs: Vec<_> = std::net::ToSocketAddrs::to_socket_addrs(host)
        .map_err(unreachable)?
        .collect();
    let addr = addrs
        .first()
        .ok_or_else(|| format!("coordinator address '{host}' does not resolve"))?;
    let mut stream =
        TcpStream::connect_timeout(addr, Duration::from_secs(5)).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(unreachable)?;
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(unreachable)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(unreachable)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| "malformed HTTP reply from the coordinator".to_string())?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "malformed HTTP status line from the coordinator".to_string())?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let payload = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let body = if payload.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&payload)
            .map_err(|e| format!("the coordinator sent a body that is not JSON: {e}"))?
    };
    Ok(Reply { status, body })
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}
