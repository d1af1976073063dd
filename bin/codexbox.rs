//! The codexbox executable: dispatch on argv[0] or the subcommand, nothing else.

fn main() {
    std::process::exit(codexbox::dispatch(std::env::args_os().collect()));
}
