//! The checks of `coordination.mysql.url`, `coordination.redis.url` and the content of
//! their `password_file`, on arbitrary input (issue 31, class 6): what passes `load` is
//! what the store drivers take, so that a command never fails at connect (exit 3) on what
//! a config check could have refused (exit 2).
//!
//! Beyond "no panic" (the checks run the drivers' own URL parsers, which must not panic
//! either):
//! - an accepted URL has the backend's scheme, a host, no password and no `#fragment`
//!   (rediss's `#insecure` turns off the certificate check), and for MySQL a database;
//! - an accepted password holds no NUL and no line break, and is the file's content
//!   without its trailing line breaks.

#![no_main]

use libfuzzer_sys::fuzz_target;
use warden::config::{check_store_url, store_password, Backend};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for backend in [Backend::Mysql, Backend::Redis] {
        if check_store_url(backend, &text).is_ok() {
            accepted(backend, &text);
        }
    }
    if let Ok(password) = store_password(data.to_vec()) {
        assert!(
            !password.contains(['\0', '\n', '\r']),
            "accepted a password with a NUL or a line break: {password:?}"
        );
        let rest = data
            .strip_prefix(password.as_bytes())
            .expect("the password is the start of the file");
        assert!(
            rest.iter().all(|b| matches!(b, b'\n' | b'\r')),
            "more than line breaks after the password: {rest:?}"
        );
    }
});

/// What must hold of every URL `check_store_url` accepts.
fn accepted(backend: Backend, text: &str) {
    let url = url::Url::parse(text).expect("an accepted URL parses");
    let schemes: &[&str] = match backend {
        Backend::Mysql => &["mysql"],
        _ => &["redis", "rediss"],
    };
    assert!(schemes.contains(&url.scheme()), "{backend:?} took {text:?}");
    assert!(url.password().is_none(), "a password passed: {text:?}");
    assert!(url.fragment().is_none(), "a fragment passed: {text:?}");
    assert!(
        url.host_str().is_some_and(|h| !h.is_empty()),
        "no host: {text:?}"
    );
    if backend == Backend::Mysql {
        assert!(
            !url.path().trim_matches('/').is_empty(),
            "no database: {text:?}"
        );
    }
}
