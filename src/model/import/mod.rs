//! Bringing models in from other formats: a Hugging Face `config.json` becomes a model file of a
//! shipped family ([`hf`]); an ONNX graph becomes a model file with an explicit graph of shipped
//! operator rules ([`onnx`]).

pub mod hf;
mod json;
pub mod onnx;
mod onnx_coverage;
mod onnx_fold;
mod onnx_heads;
mod onnx_infer;
mod onnx_map;
mod onnx_ops;
#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod onnx_pb;
mod onnx_repeat;
mod onnx_shape;

pub use hf::{import_hf, model_source_from_hf, HfImport};
pub use onnx::{import_onnx, model_source_from_onnx, OnnxImport, OnnxOptions, Unmapped};

/// A string as a YAML scalar: JSON's double-quoted form, which YAML reads back unchanged.
pub(crate) fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}
