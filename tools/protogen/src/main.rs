fn main() {
    let dir = std::env::args().nth(1).expect("dir of sparkplug_b.proto");
    let out = std::env::args().nth(2).expect("out dir");
    let fds = protox::compile([format!("{dir}/sparkplug_b.proto")], [dir.clone()]).expect("compile");
    let mut cfg = prost_build::Config::new();
    cfg.out_dir(out);
    cfg.compile_fds(fds).expect("generate");
}
