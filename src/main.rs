//! The `unilab` binary: all of it is the library's [`unilab::main`].

fn main() -> std::process::ExitCode {
    unilab::main()
}
