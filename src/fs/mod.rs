//! Filesystem operations, implemented once and shared by the server's direct path and the fs-helper.
