fn main() {
    // Printing into a closed pipe (`symshard rank … | head`) ends the program quietly, as other
    // command-line tools do, instead of panicking.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(symshard::cli::main());
}
