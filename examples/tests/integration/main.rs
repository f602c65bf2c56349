//! The integration tests of the examples, as one binary (one binary per file would each be linked
//! against every backend): the binaries run as a user runs them, and the README's code compiled.

mod binaries;
mod readme;
