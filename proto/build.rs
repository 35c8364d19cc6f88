//! Compiles every `.proto` file under `proto/proto/` with `protox` (pure Rust: no `protoc`
//! needed) and generates prost messages plus tonic clients and servers.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::Path::new("proto");
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "proto"));
    files.sort();
    println!("cargo:rerun-if-changed=proto");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [dir])?;
    tonic_prost_build::configure()
        // Record batches and opaque Raft payloads travel as `bytes::Bytes`: no copies on the
        // data path (DESIGN §1).
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
