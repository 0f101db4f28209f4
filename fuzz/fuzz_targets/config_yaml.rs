//! No YAML text panics the config parser or the validator: every input ends in a config or a
//! list of problems, and a problem list is never empty.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(problems) = opex_connector::config::from_yaml(&text) {
        assert!(!problems.is_empty(), "an error without a problem");
        // Rendering the problems (what `validate` prints) must not panic either.
        let _ = problems.to_string();
    }
    if let Ok((raw, _)) = opex_connector::config::parse_raw(&text) {
        let _ = opex_connector::config::validate(&raw);
    }
});
