import Foundation

/// A value computed on a thread of its own while the caller goes on.
/// Any number of threads may wait for it; each gets the same value, or
/// the same error.
public final class Prefetch<Value>: @unchecked Sendable {
    private let done = DispatchGroup()
    // Written by the thread before it leaves `done`, read only after
    // waiting on `done`.
    private var result: Result<Value, any Error>?

    /// Starts `job` on a new thread.
    public init(_ job: @escaping @Sendable () throws -> Value) {
        done.enter()
        Thread { [self] in
            result = Result { try job() }
            done.leave()
        }.start()
    }

    /// Waits for the value, and returns it or throws its error.
    public func wait() throws -> Value {
        done.wait()
        return try result!.get()
    }
}
