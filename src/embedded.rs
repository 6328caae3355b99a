//! Rule, model and calibration files built into the binary.

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// The name under which an embedded file is reported in messages.
pub fn display_path(dir: &str, stem: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{dir}/{stem}.yaml"))
}
