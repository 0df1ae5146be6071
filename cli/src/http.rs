//! The client of the coordinator's REST API (JSON in, JSON out), over
//! reqwest's blocking client: `http://` and `https://` coordinator URLs.

use std::time::Duration;

/// A reply: status code and parsed JSON body.
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
}

/// Call `method path` on the coordinator at `url` (`http[s]://host:port`).
pub fn call(
    url: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Reply, String> {
    let base = url.trim_end_matches('/');
    if !base.starts_with("http://") && !base.starts_with("https://") {
        return Err(format!(
            "coordinator URL '{url}' must start with http:// or https://"
        ));
    }
    let client = client(base.starts_with("https://"))?;
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("'{method}' is not an HTTP method"))?;
    let mut request = client
        .request(method, format!("{base}{path}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    if let Some(b) = body {
        request = request.body(b.to_string());
    }
    let reply = request.send().map_err(|e| {
        format!("cannot reach the coordinator at {url}: {e} (is `weir coordinator` running?)")
    })?;
    let status = reply.status().as_u16();
    let text = reply
        .text()
        .map_err(|e| format!("reading the coordinator's reply: {e}"))?;
    let body = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&text)
            .map_err(|e| format!("the coordinator sent a body that is not JSON: {e}"))?
    };
    Ok(Reply { status, body })
}

/// One client for the process per scheme: each blocking client starts its
/// own runtime thread, which polling a running job every few tens of
/// milliseconds paid again and again (3% of a one-core benchmark run). Only
/// the `https://` one loads the machine's trust roots: parsing them cost
/// every `weir run` (whose coordinator is `http://` on loopback) 3% of a
/// short job's instructions.
fn client(tls: bool) -> Result<&'static reqwest::blocking::Client, String> {
    type Slot = std::sync::OnceLock<Result<reqwest::blocking::Client, String>>;
    static PLAIN: Slot = Slot::new();
    static TLS: Slot = Slot::new();
    (if tls { &TLS } else { &PLAIN })
        .get_or_init(|| {
            reqwest::blocking::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(60))
                .tls_built_in_root_certs(tls)
                .build()
                .map_err(|e| format!("cannot build an HTTP client: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}
