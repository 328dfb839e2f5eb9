internal import CLockerSupport

/// The process's buffered standard output (what `print` writes).
public enum ProcessOutput {
    /// Writes out what is buffered for standard output and throws if that,
    /// or any earlier write to it, failed: a full disk, a closed pipe. A
    /// command that printed its result must not report success when the
    /// result went nowhere.
    public static func flush() throws(IOError) {
        let failure = locker_flush_stdout()
        if failure != 0 { throw IOError("write", path: "standard output", errno: failure) }
    }
}
