// The key agent that `locker` starts beside itself: the agent alone,
// without the command line's parser and Foundation, so that the process
// that holds the class keys for hours maps as little as it can.
//
//     locker-agent --device DIR
//
// `locker agent --device DIR` runs the same agent in the foreground from
// the `locker` binary; `locker` falls back to it when this program is not
// installed beside it.
import LockerAgent
#if canImport(Glibc)
import Glibc
#endif

/// Writes `locker-agent: error: LINE` to standard error and exits with
/// `code` (1, or 64 for a usage error, as `locker` does), at once: a
/// thread the agent started may still run.
func fail(_ line: String, code: Int32) -> Never {
    let text = "locker-agent: error: \(line)\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    _exit(code)
}

let arguments = CommandLine.arguments
guard arguments.count == 3, arguments[1] == "--device", !arguments[2].isEmpty else {
    fail("usage: locker-agent --device DIR (commands start it; 'locker agent' runs it by hand)", code: 64)
}
do {
    try AgentServer.run(devicePath: arguments[2])
} catch let serving as AgentAlreadyServing {
    fail("an agent already serves \(serving.devicePath)" + (serving.pid.map { " (pid \($0))" } ?? ""), code: 1)
} catch AgentError.unavailable(let reason) {
    fail(reason, code: 1)
} catch AgentError.socketPathTooLong(let path) {
    fail("the agent socket path is too long: \(path) (use a shorter device path)", code: 64)
} catch {
    fail("\(error)", code: 1)
}
