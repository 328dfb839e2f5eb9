import ArgumentParser
import FoundationEssentials
import Glibc
import LockerCrypto

/// Reads passcodes: from a no-echo prompt on the terminal, or as lines on
/// standard input. Never from argv or the environment.
struct PasscodeInput {
    /// Read lines from stdin even when it is a terminal.
    var fromStandardInput: Bool

    var interactive: Bool { !fromStandardInput && isatty(STDIN_FILENO) == 1 }

    /// Which passcode a line holds, for the errors when it is missing or
    /// empty.
    struct Expected {
        /// What the line holds, as the error names it.
        var what = "a passcode"
        /// How stdin must look, for the hint when the line is missing.
        var lines = "pass it as one line on stdin, or run on a terminal"
        /// The hint for an empty line. Only `init` can make a device
        /// without a passcode, so only its line has one.
        var emptyHint: String?

        /// The one line of `init`.
        static let initPasscode = Expected(what: "the new passcode", emptyHint: "use --no-passcode for a device without one")

        /// The one line of `reset`, and of `passwd` on a device without a
        /// passcode.
        static let newPasscode = Expected(what: "the new passcode")

        /// `passwd`'s lines: the current passcode, then the new one.
        static func passwd(new: Bool) -> Expected {
            Expected(what: new ? "the new passcode" : "the current passcode",
                     lines: "pass two lines on stdin, the current passcode then the new one, or run on a terminal")
        }
    }

    /// One passcode. On a terminal, prompts with `prompt`; with `confirm`,
    /// asks twice and insists they match.
    func read(prompt: String, confirm: Bool = false, expected: Expected = Expected()) throws -> SecretBytes {
        if interactive {
            let first = try promptNoEcho(prompt)
            if confirm {
                let second = try promptNoEcho("Repeat the passcode: ")
                guard first == second else { throw CommandFailure(.usage, "the passcodes did not match") }
            }
            return try nonEmpty(first, expected)
        }
        guard let line = Self.readLine() else {
            throw CommandFailure(.usage, "expected \(expected.what) on standard input", hint: expected.lines)
        }
        return try nonEmpty(line, expected)
    }

    private func nonEmpty(_ passcode: SecretBytes, _ expected: Expected) throws -> SecretBytes {
        guard passcode.count > 0 else {
            throw CommandFailure(.usage, "the passcode is empty",
                                 hint: expected.emptyHint)
        }
        guard passcode.count <= 1024 else { throw CommandFailure(.usage, "the passcode is longer than 1024 bytes") }
        return passcode
    }

    private func promptNoEcho(_ prompt: String) throws -> SecretBytes {
        writeToStandardError(prompt)
        var saved = termios()
        guard tcgetattr(STDIN_FILENO, &saved) == 0 else {
            guard let line = Self.readLine() else { throw CommandFailure(.usage, "no passcode was entered") }
            return line
        }
        // Registered before echo goes off: a Ctrl-C at the prompt must not
        // leave the terminal without echo.
        let line = Interruption.restoringTerminal(saved) {
            var silent = saved
            silent.c_lflag &= ~tcflag_t(ECHO)
            _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
            defer {
                _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
                writeToStandardError("\n")
            }
            return Self.readLine()
        }
        guard let line else { throw CommandFailure(.usage, "no passcode was entered") }
        return line
    }

    /// Reads one line from stdin byte by byte (so nothing past the newline
    /// is consumed and no unwiped buffer is left behind), without the
    /// newline. Returns nil at end of input with nothing read.
    static func readLine() -> SecretBytes? {
        var buffer = [UInt8](repeating: 0, count: 1025)
        var count = 0
        var sawAnything = false
        // OPENSSL_cleanse: a loop of stores to memory about to be freed
        // is one the optimizer may drop.
        defer { SecretBytes.wipe(&buffer) }
        while true {
            var byte: UInt8 = 0
            let n = Glibc.read(STDIN_FILENO, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            sawAnything = true
            if byte == UInt8(ascii: "\n") { break }
            if count < buffer.count { buffer[count] = byte }
            count += 1
        }
        guard sawAnything else { return nil }
        if count > 0, count <= buffer.count, buffer[count - 1] == UInt8(ascii: "\r") { count -= 1 }
        let kept = min(count, buffer.count)
        return SecretBytes(copying: buffer[..<kept])
    }
}

/// Soaks up stray words on commands that read a passcode, so that a
/// passcode typed as an argument (`locker unlock 1234`) is refused without
/// being echoed in the error, as ArgumentParser's "Unexpected argument
/// '1234'" would.
struct NoPasscodeArguments: ParsableArguments {
    @Argument(help: .hidden)
    var stray: [String] = []

    func validate() throws {
        guard stray.isEmpty else {
            throw ValidationError("this command takes no arguments; passcodes are never read from the command line")
        }
    }
}
