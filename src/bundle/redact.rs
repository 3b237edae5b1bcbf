//! Masking what a bug report must not leak: home-directory user names, host names, IP
//! addresses, tokens and keys, e-mail addresses.
//!
//! Used by `oomdoctor bundle` on everything it writes. Masks are bracketed words (`[USER]`,
//! `[HOST]`, `[IP]`, `[TOKEN]`, `[EMAIL]`) rather than `<user>`, because GitHub drops unknown
//! HTML-like tags from markdown and the mask would vanish. Masking errs towards masking (a
//! value after `TOKEN=` is masked whatever it looks like), but keeps what a diagnosis needs:
//! sizes, versions, PyTorch's own documentation links, file names such as `train.py`,
//! C++ names such as `c10::cuda`, timestamps.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// How many things of each kind were masked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub users: usize,
    pub hosts: usize,
    pub ips: usize,
    pub tokens: usize,
    pub emails: usize,
    /// Matches of the patterns the user added (`--redact`, `redact` in the configuration).
    pub other: usize,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.users + self.hosts + self.ips + self.tokens + self.emails + self.other
    }

    pub fn add(&mut self, o: Counts) {
        self.users += o.users;
        self.hosts += o.hosts;
        self.ips += o.ips;
        self.tokens += o.tokens;
        self.emails += o.emails;
        self.other += o.other;
    }
}

fn re(p: &str) -> Regex {
    Regex::new(p).expect("static regex")
}

/// Token shapes that are secret by themselves.
static TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        // A JSON-escaped character (`hf_\u0041...`) must not hide a token.
        r"\bhf_(?:[A-Za-z0-9]|\\u[0-9A-Fa-f]{4}){20,}",
        r"|\bnpm_[A-Za-z0-9]{36}\b",
        r"|\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}",
        r"|\bgh[pousr]_[A-Za-z0-9]{30,}\b",
        r"|\bgithub_pat_[A-Za-z0-9_]{22,}\b",
        r"|\bglpat-[A-Za-z0-9_-]{20,}\b",
        r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        r"|\bxox[abposr]-[A-Za-z0-9-]{10,}",
        r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        r"|\bwandb_v1_[A-Za-z0-9_]{20,}"
    ))
});

/// `Authorization: Bearer x`, `bearer x`, `--hf-token x`, `token=x`, `HF_TOKEN=x`,
/// `AWS_SECRET_ACCESS_KEY: x`, `api_key="x"`: the name is kept, the value masked.
static KEYED: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r#"(\b(?i:authorization)\s*[:=]\s*(?:(?i:bearer|basic|token)\s+)?|\b(?i:bearer)\s+)([A-Za-z0-9._~+/=-]{8,})"#,
        r#"|(--(?i:(?:hf[-_])?(?:token|api[-_]key|password|secret))(?:=|\s+))(\S+)"#,
        r#"|\b((?i:api[_-]?key|access[_-]?token|auth[_-]?token|hf[_-]?token|secret[_-]?(?:access[_-]?)?key|password|passwd|token)|[A-Z][A-Z0-9_]*(?:TOKEN|_KEY|SECRET|PASSWORD|PASSWD|_PAT))(\s*[=:]\s*["']?)([^\s"',;\]\)}]+)"#
    ))
});

/// The value of any assignment whose name says it is secret (`aws_secret_access_key = x`,
/// `AccountKey=x;`, `"private_key_id": "x"`, `"auth": "x"`, `WANDB_API_KEY x`): listing
/// vendors one by one always misses the next one. The name must contain one of the words;
/// the closure keeps numbers and the tokenizer's vocabulary (`max_tokens: 512`,
/// `pad_token=</s>`).
static KEY_NAMED: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r#"\b([A-Za-z0-9_.-]*(?i:key|secret|token|password|passwd|credential|auth)[A-Za-z0-9_.-]*)"#,
        r#"(["']?\s*[=:]\s*["']?|[ \t]+)([^\s"',;\]\)}\[({][^\s"',;\]\)}]*)"#
    ))
});

/// A PEM private key, header to footer (or to the end, when the excerpt is cut).
static PEM: LazyLock<Regex> = LazyLock::new(|| {
    re(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)")
});

/// A line that is nothing but a long base64 run: a key body line met without its header
/// (an excerpt of two lines around a log line can start inside a PEM block).
static BASE64_LINE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?m)^[ \t]*[A-Za-z0-9+/]{60,}={0,2}[ \t]*$"));

/// `USER=alice`, `LOGNAME: alice`: the name the masked home directory hid.
static USER_VAR: LazyLock<Regex> =
    LazyLock::new(|| re(r#"\b(USER|LOGNAME|USERNAME)(\s*[=:]\s*["']?)([A-Za-z0-9._-]+)"#));

/// `/root` (the home of root) and `~alice` (anyone's).
static TILDE_HOME: LazyLock<Regex> =
    LazyLock::new(|| re(r"\B/root\b|\B~([A-Za-z_][A-Za-z0-9._-]*)"));

/// Whether a secret-looking name is the tokenizer's or a count (`max_num_batched_tokens`,
/// `tokenizer`, `pad_token`), not a credential.
fn vocabulary_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with("tokens")
        || n.contains("tokenizer")
        || n.contains("key_value")
        || ["pad", "eos", "bos", "unk", "sep", "cls", "mask"]
            .iter()
            .any(|t| n.ends_with(&format!("{t}_token")) || n.ends_with(&format!("{t}_token_id")))
}

/// Values that are never secrets: numbers and sizes, booleans, `none`, `auto`.
fn plain_value(v: &str) -> bool {
    let v = v.trim_matches(|c| c == '"' || c == '\'');
    v.is_empty()
        || v.starts_with('[')
        || matches!(
            v.to_ascii_lowercase().as_str(),
            "true" | "false" | "none" | "null" | "auto" | "yes" | "no" | "on" | "off"
            // `Authorization: Bearer x`: the scheme; the credential after it is masked
            // by KEYED.
            | "bearer" | "basic" | "digest" | "token"
        )
        || (v.starts_with(|c: char| c.is_ascii_digit())
            && v.chars().all(|c| c.is_ascii_digit() || ".,_".contains(c))
            || crate::facts::units::parse_size(v, crate::facts::units::SiBase::Binary).is_some())
}

/// Credentials in URLs: `https://user:pass@host`.
static URL_CREDS: LazyLock<Regex> =
    LazyLock::new(|| re(r"([a-z][a-z0-9+.-]*://)([^\s:/@]+):([^\s/@]+)@"));

/// Shell prompts: `alice@gpu-box:~/proj$`.
static PROMPT: LazyLock<Regex> =
    LazyLock::new(|| re(r"\b([A-Za-z0-9._-]+)@([A-Za-z0-9._-]+):([~/])"));

static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| re(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"));

/// Home directories on Linux, macOS and Windows (either slash, escaped backslashes too).
static HOME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"(/home/|/Users/|/var/home/|/users?/|(?i:\b[A-Z]:(?:\\\\|\\|/)Users(?:\\\\|\\|/)))([^/\\\s:'"`\]\)]+)"#,
    )
});

/// syslog/journald: `May 02 08:00:01 gpu-node-17 kernel:` and the ISO form.
static SYSLOG_HOST: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"\b((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?",
        r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))",
        r"\s+([A-Za-z0-9][A-Za-z0-9._-]*)(\s+[A-Za-z_(][\w./()-]*(?:\[\d+\])?:)"
    ))
});

/// `host=x`, `hostname: x`, `MASTER_ADDR=x`, `node=x`, `srun: error: x: task 0`.
static KEYED_HOST: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r#"(?i)(\b(?:host(?:name)?|node(?:name)?|nodelist|master_addr|master-addr|server_host)(?:\s*[=:]\s*|\s+:\s+)["']?)([A-Za-z0-9][A-Za-z0-9._\[\],-]*)"#,
        r"|(\b(?:srun|slurmstepd): error: )([A-Za-z][A-Za-z0-9._-]*)(: )"
    ))
});

static IPV4: LazyLock<Regex> =
    LazyLock::new(|| re(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b"));

static IPV6: LazyLock<Regex> = LazyLock::new(|| {
    // The compressed form first: the regex takes the first alternative that matches.
    re(
        r"(?i)(?:[0-9a-f]{1,4}:){1,7}:(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){0,6})?|(?:[0-9a-f]{1,4}:){2,7}[0-9a-f]{1,4}",
    )
});

static FQDN: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\b(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24})\b")
});

/// Top-level domains that mark a host name (and not a file extension: `.py` is Paraguay's,
/// `.sh` St Helena's, so they are left out).
const TLDS: &[&str] = &[
    "com", "net", "org", "io", "ai", "dev", "cloud", "internal", "local", "lan", "corp", "home",
    "intranet", "edu", "gov", "mil", "int", "co", "uk", "de", "fr", "jp", "cn", "us", "ca", "au",
    "in", "eu", "nl", "ch", "se", "kr", "sg", "info", "biz", "me", "tech", "app", "site", "xyz",
    "cluster", "svc", "lab",
];

/// Public sites whose names are not private: PyTorch prints its documentation link in every
/// OOM message, and the hubs and package indexes are what a bug report is about.
const PUBLIC: &[&str] = &[
    "pytorch.org",
    "github.com",
    "githubusercontent.com",
    "huggingface.co",
    "hf.co",
    "nvidia.com",
    "python.org",
    "pypi.org",
    "readthedocs.io",
    "vllm.ai",
    "ollama.com",
    "ggml.ai",
    "docker.io",
    "docker.com",
    "kubernetes.io",
    "anaconda.org",
    "conda.io",
    "wandb.ai",
    "sglang.ai",
];

fn is_public(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    PUBLIC
        .iter()
        .any(|p| h == *p || h.ends_with(&format!(".{p}")))
}

/// Masks the text; returns it with what was masked.
pub fn redact_counted(text: &str) -> (String, Counts) {
    let mut n = Counts::default();
    let s = PEM.replace_all(text, |_: &Captures<'_>| {
        n.tokens += 1;
        "[TOKEN]"
    });
    let s = BASE64_LINE.replace_all(&s, |_: &Captures<'_>| {
        n.tokens += 1;
        "[TOKEN]"
    });
    let s = TOKENS.replace_all(&s, |_: &Captures<'_>| {
        n.tokens += 1;
        "[TOKEN]"
    });
    let s = KEYED.replace_all(&s, |c: &Captures<'_>| {
        let (name, value) = if let Some(v) = c.get(2) {
            (c.get(1).map_or("", |m| m.as_str()), v.as_str())
        } else if let Some(v) = c.get(4) {
            (c.get(3).map_or("", |m| m.as_str()), v.as_str())
        } else {
            let name = format!(
                "{}{}",
                c.get(5).map_or("", |m| m.as_str()),
                c.get(6).map_or("", |m| m.as_str())
            );
            let v = c.get(7).map_or("", |m| m.as_str());
            if v.starts_with('[') || v.is_empty() {
                return c[0].to_string();
            }
            n.tokens += 1;
            return format!("{name}[TOKEN]");
        };
        if value.starts_with('[') {
            return c[0].to_string();
        }
        n.tokens += 1;
        format!("{name}[TOKEN]")
    });
    let s = KEY_NAMED.replace_all(&s, |c: &Captures<'_>| {
        let (name, sep, value) = (&c[1], &c[2], &c[3]);
        // `WANDB_API_KEY 0123…` (a space, no `=`) only for environment-style names: in
        // prose, "the key is" is not an assignment.
        let spaced = !sep.contains(['=', ':']);
        let env_style = name
            .chars()
            .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_');
        if vocabulary_name(name) || plain_value(value) || (spaced && !env_style) {
            return c[0].to_string();
        }
        n.tokens += 1;
        format!("{name}{sep}[TOKEN]")
    });
    let s = USER_VAR.replace_all(&s, |c: &Captures<'_>| {
        if c[3].starts_with('[') {
            return c[0].to_string();
        }
        n.users += 1;
        format!("{}{}[USER]", &c[1], &c[2])
    });
    let s = TILDE_HOME.replace_all(&s, |c: &Captures<'_>| {
        n.users += 1;
        if c.get(1).is_some() {
            "~[USER]".to_string()
        } else {
            "/[USER]".to_string()
        }
    });
    let s = URL_CREDS.replace_all(&s, |c: &Captures<'_>| {
        n.tokens += 1;
        format!("{}[USER]:[TOKEN]@", &c[1])
    });
    let s = PROMPT.replace_all(&s, |c: &Captures<'_>| {
        n.users += 1;
        n.hosts += 1;
        format!("[USER]@[HOST]:{}", &c[3])
    });
    let s = EMAIL.replace_all(&s, |_: &Captures<'_>| {
        n.emails += 1;
        "[EMAIL]"
    });
    let s = HOME.replace_all(&s, |c: &Captures<'_>| {
        if c[2].starts_with('[') {
            return c[0].to_string();
        }
        n.users += 1;
        format!("{}[USER]", &c[1])
    });
    let s = SYSLOG_HOST.replace_all(&s, |c: &Captures<'_>| {
        n.hosts += 1;
        format!("{} [HOST]{}", &c[1], &c[3])
    });
    let s = KEYED_HOST.replace_all(&s, |c: &Captures<'_>| {
        if let Some(v) = c.get(2) {
            let v = v.as_str();
            // `node 0`, `host: 1`: an index, not a name.
            if v.chars().all(|ch| ch.is_ascii_digit()) || v.starts_with("[HOST") {
                return c[0].to_string();
            }
            n.hosts += 1;
            return format!("{}[HOST]", &c[1]);
        }
        n.hosts += 1;
        format!("{}[HOST]{}", &c[3], &c[5])
    });
    let s = IPV4.replace_all(&s, |c: &Captures<'_>| {
        let octets: Vec<u32> = (1..=4).filter_map(|i| c[i].parse().ok()).collect();
        let whole = &c[0];
        if octets.len() != 4 || octets.iter().any(|o| *o > 255) {
            return whole.to_string();
        }
        if whole == "127.0.0.1" || whole == "0.0.0.0" {
            return whole.to_string();
        }
        n.ips += 1;
        "[IP]".to_string()
    });
    let owned = s.into_owned();
    let s = IPV6.replace_all(&owned, |c: &Captures<'_>| {
        let m = c.get(0).map_or("", |m| m.as_str());
        let (start, end) = c.get(0).map_or((0, 0), |m| (m.start(), m.end()));
        let before = owned[..start].chars().next_back();
        let after = owned[end..].chars().next();
        let word = |ch: Option<char>| ch.is_some_and(|ch| ch.is_alphanumeric() || ch == '_');
        let groups: Vec<&str> = m.split(':').filter(|g| !g.is_empty()).collect();
        let compressed = m.contains("::");
        let enough = if compressed {
            groups.len() >= 2
        } else {
            groups.len() >= 6
        };
        let has_digit = m.chars().any(|ch| ch.is_ascii_digit());
        if !enough
            || !has_digit
            || word(before)
            || word(after)
            || before == Some(':')
            || after == Some(':')
        {
            return m.to_string();
        }
        n.ips += 1;
        "[IP]".to_string()
    });
    let owned = s.into_owned();
    let s = FQDN.replace_all(&owned, |c: &Captures<'_>| {
        let whole = &c[0];
        let tld = c[1].to_ascii_lowercase();
        // `pandas.io.parsers`: a dotted name that goes on is code, not a host.
        let end = c.get(0).map_or(0, |m| m.end());
        let mut rest = owned[end..].chars();
        let continues =
            rest.next() == Some('.') && rest.next().is_some_and(|ch| ch.is_alphanumeric());
        if continues || !TLDS.contains(&tld.as_str()) || is_public(whole) {
            return whole.to_string();
        }
        n.hosts += 1;
        "[HOST]".to_string()
    });
    (s.into_owned(), n)
}

/// Masks what the user's patterns match as `[REDACTED]`, then the rest as
/// [`redact_counted`] does.
pub fn redact_with(text: &str, extra: &[Regex]) -> (String, Counts) {
    let mut other = 0;
    let mut s = std::borrow::Cow::Borrowed(text);
    for re in extra {
        if let std::borrow::Cow::Owned(o) = re.replace_all(&s, |_: &Captures<'_>| {
            other += 1;
            "[REDACTED]"
        }) {
            s = std::borrow::Cow::Owned(o);
        }
    }
    let (out, mut n) = redact_counted(&s);
    n.other = other;
    (out, n)
}

/// Masks the text.
pub fn redact(text: &str) -> String {
    redact_counted(text).0
}

/// Masks every string in a JSON value (keys are field and fact names, left alone).
pub fn redact_json(v: &mut serde_json::Value) -> Counts {
    redact_json_with(v, &[])
}

/// [`redact_json`] with the user's patterns too (see [`redact_with`]).
pub fn redact_json_with(v: &mut serde_json::Value, extra: &[Regex]) -> Counts {
    let mut n = Counts::default();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::String(s) => {
                let (r, c) = redact_with(s, extra);
                n.add(c);
                *s = r;
            }
            serde_json::Value::Array(a) => stack.extend(a.iter_mut()),
            serde_json::Value::Object(o) => stack.extend(o.values_mut()),
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> String {
        redact(s)
    }

    #[test]
    fn home_paths() {
        assert_eq!(
            r("File \"/home/alice/proj/train.py\", line 3"),
            "File \"/home/[USER]/proj/train.py\", line 3"
        );
        assert_eq!(r("/Users/bob.smith/x.log"), "/Users/[USER]/x.log");
        assert_eq!(r(r"C:\Users\Carol\run\a.py"), r"C:\Users\[USER]\run\a.py");
        assert_eq!(r(r"C:\\Users\\Carol\\a.py"), r"C:\\Users\\[USER]\\a.py");
        assert_eq!(r("c:/Users/dave/a.py"), "c:/Users/[USER]/a.py");
        assert_eq!(r("/home/[USER]/x"), "/home/[USER]/x", "idempotent");
    }

    #[test]
    fn hosts() {
        assert_eq!(
            r("May 02 08:00:01 gpu-node-17 kernel: Out of memory: Killed process 4242 (python)"),
            "May 02 08:00:01 [HOST] kernel: Out of memory: Killed process 4242 (python)"
        );
        assert_eq!(
            r(
                "Feb 03 19:57:08 dgx01 systemd[1]: session.scope: A process of this unit has been killed by the OOM killer."
            ),
            "Feb 03 19:57:08 [HOST] systemd[1]: session.scope: A process of this unit has been killed by the OOM killer."
        );
        assert_eq!(r("host=trainer-3 rank=0"), "host=[HOST] rank=0");
        assert_eq!(r("  hostname  : worker-7.prod"), "  hostname  : [HOST]");
        assert_eq!(r("MASTER_ADDR=node-a12"), "MASTER_ADDR=[HOST]");
        assert_eq!(r("node 0 of 4, node=3"), "node 0 of 4, node=3");
        assert_eq!(
            r("srun: error: gpu-node-17: task 0: Out Of Memory"),
            "srun: error: [HOST]: task 0: Out Of Memory"
        );
        assert_eq!(
            r("connecting to ip-10-0-1-23.ec2.internal and db.acme-corp.com"),
            "connecting to [HOST] and [HOST]"
        );
        assert_eq!(
            r("alice@gpu-box:~/proj$ python train.py"),
            "[USER]@[HOST]:~/proj$ python train.py"
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(r("bind 10.0.3.17:29500 failed"), "bind [IP]:29500 failed");
        assert_eq!(
            r("listening on 0.0.0.0:8000 and 127.0.0.1"),
            "listening on 0.0.0.0:8000 and 127.0.0.1"
        );
        assert_eq!(r("peer fe80::1ff:fe23:4567:890a%eth0"), "peer [IP]%eth0");
        assert_eq!(r("from 2001:db8::8a2e:370:7334 ok"), "from [IP] ok");
        assert_eq!(r("mac 00:1a:2b:3c:4d:5e"), "mac [IP]");
    }

    #[test]
    fn tokens() {
        let hf = "hf_abcdefghijklmnopqrstuvwxyz0123";
        assert_eq!(r(&format!("login {hf}")), "login [TOKEN]");
        assert_eq!(r("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12"), "key [TOKEN]");
        assert_eq!(r("ghp_0123456789abcdefghijklmnopqrstuvwxyz"), "[TOKEN]");
        assert_eq!(r("AKIAIOSFODNN7EXAMPLE"), "[TOKEN]");
        assert_eq!(
            r("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            "AWS_SECRET_ACCESS_KEY=[TOKEN]"
        );
        assert_eq!(r("export HF_TOKEN=abc123"), "export HF_TOKEN=[TOKEN]");
        assert_eq!(
            r("WANDB_API_KEY: 0123456789abcdef"),
            "WANDB_API_KEY: [TOKEN]"
        );
        assert_eq!(
            r("Authorization: Bearer abc.def.ghi-jkl"),
            "Authorization: Bearer [TOKEN]"
        );
        assert_eq!(r("--hf-token hf_short"), "--hf-token [TOKEN]");
        assert_eq!(r("api_key=\"xyz987654\""), "api_key=\"[TOKEN]\"");
        assert_eq!(
            r("hf_token=abc pad_token=</s>"),
            "hf_token=[TOKEN] pad_token=</s>"
        );
        assert_eq!(
            r("pip install git+https://bob:s3cret@git.acme.com/x.git"),
            "pip install git+https://[USER]:[TOKEN]@[HOST]/x.git"
        );
    }

    /// Each class of secret that the vendor list missed (issue 14).
    #[test]
    fn secrets_by_name_and_by_shape() {
        let cases = [
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "aws_secret_access_key = [TOKEN]",
            ),
            (
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4+/==;EndpointSuffix=core.windows.net",
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=[TOKEN];EndpointSuffix=[HOST]",
            ),
            (
                "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789",
                "//[HOST]/:_authToken=[TOKEN]",
            ),
            (
                "npm_abcdefghijklmnopqrstuvwxyz0123456789 was used",
                "[TOKEN] was used",
            ),
            (
                r#""private_key_id": "0123456789abcdef0123456789abcdef01234567","#,
                r#""private_key_id": "[TOKEN]","#,
            ),
            (
                r#"{"auths": {"ghcr.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}"#,
                r#"{"auths": {"[HOST]": {"auth": "[TOKEN]"}}}"#,
            ),
            (
                "WANDB_API_KEY 0123456789abcdef0123456789abcdef01234567",
                "WANDB_API_KEY [TOKEN]",
            ),
            (
                r#""WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567""#,
                r#""WANDB_API_KEY": "[TOKEN]""#,
            ),
            (
                r"token hf_\u0041bcdefghijklmnopqrstuvwxyz0123 end",
                "token [TOKEN] end",
            ),
            ("USER=alice LOGNAME=alice", "USER=[USER] LOGNAME=[USER]"),
            (
                "cd /root/proj && ls ~alice/x",
                "cd /[USER]/proj && ls ~[USER]/x",
            ),
            ("/data/users/dave/run.log", "/data/users/[USER]/run.log"),
        ];
        for (input, want) in cases {
            assert_eq!(r(input), want, "{input}");
        }
        let pem = "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabcDEF==\n-----END RSA PRIVATE KEY-----\ndone";
        assert_eq!(r(pem), "key:\n[TOKEN]\ndone");
        let gcp = r#""private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n""#;
        assert!(!r(gcp).contains("MIIEvQ"), "{}", r(gcp));
        // A key body line met without its header (an excerpt cut inside the block).
        let body = format!("{}\nnext", "A".repeat(32) + &"b/9+".repeat(8));
        assert_eq!(r(&body), "[TOKEN]\nnext");
        // Not secrets: counts, the tokenizer's vocabulary, prose.
        for keep in [
            "max_tokens: 512 tokenizer=meta-llama/Llama-3.1-8B pad_token=</s> eos_token_id=2",
            "num_key_value_heads=8 use_auth=false token_budget=4096",
            "the key is in the drawer, /rootfs and /mnt/root stay, ~1.5 GiB",
        ] {
            assert_eq!(r(keep), keep);
        }
    }

    #[test]
    fn emails() {
        assert_eq!(
            r("contact alice.smith+oom@example.co.uk now"),
            "contact [EMAIL] now"
        );
    }

    #[test]
    fn what_a_diagnosis_needs_is_kept() {
        let keep = [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 1 has a total capacity of 79.25 GiB of which 1.21 GiB is free.",
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            "  File \"train.py\", line 141, in train_step",
            "terminate called after throwing an instance of 'c10::OutOfMemoryError' at c10::cuda::CUDACachingAllocator",
            "[2026-05-02 08:24:00] step  2400 | loss 1.600 | lr 6.0e-04 | mem 22.42 GiB",
            "torch 2.3.1+cu121, transformers 4.41.2, NVIDIA A100-SXM4-80GB, Driver Version: 535.104.05",
            "max_num_batched_tokens=8192 max_tokens: 512 num_tokens=3",
            "loading model.safetensors from config.json; transformers.models.llama.modeling_llama",
            "pandas.io.parsers.readers and c10::cuda::CUDACachingAllocator",
            "[rank0]: Traceback (most recent call last):",
            "12:34:56 step 3",
        ];
        for k in keep {
            assert_eq!(r(k), k);
        }
    }

    #[test]
    fn counts_and_json() {
        let (_, c) = redact_counted("/home/a/x 10.1.2.3 hf_abcdefghijklmnopqrstuvwxyz a@b.io");
        assert_eq!(
            c,
            Counts {
                users: 1,
                hosts: 0,
                ips: 1,
                tokens: 1,
                emails: 1,
                other: 0
            }
        );
        let extra = [regex::Regex::new(r"proj-[a-z]+").unwrap()];
        let (t, c) = redact_with("run proj-falcon on /home/a/x", &extra);
        assert_eq!(t, "run [REDACTED] on /home/[USER]/x");
        assert_eq!((c.other, c.users), (1, 1));
        let mut v =
            serde_json::json!({"input": "/home/eve/crash.log", "n": 3, "list": ["host=box1"]});
        let c = redact_json(&mut v);
        assert_eq!(v["input"], "/home/[USER]/crash.log");
        assert_eq!(v["list"][0], "host=[HOST]");
        assert_eq!(c.total(), 2);
    }
}
