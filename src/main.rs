//! The `twinops` binary: parse the command line, run it, report errors. No logic here.

use std::process::ExitCode;

fn main() -> ExitCode {
    twinops::cli::main()
}
