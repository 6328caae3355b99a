fn main() {
    std::process::exit(symshard::cli::main());
}
