//! Compiles every `.proto` under `proto/` into Rust (prost + tonic) and writes the file
//! descriptor set that server reflection and the contract tests read. Uses the protoc
//! vendored by `protoc-bin-vendored`, so no system `protoc` is needed.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = Path::new("proto");
    let mut protos = Vec::new();
    collect_protos(proto_root, &mut protos)?;
    protos.sort();
    println!("cargo:rerun-if-changed=proto");
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("wharf_descriptor.bin"))
        .compile_with_config(config, &protos, &[proto_root.to_path_buf()])?;
    Ok(())
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
