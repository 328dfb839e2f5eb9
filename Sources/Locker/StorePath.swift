/// A path inside the store: `/`-separated, absolute, with no empty, `.` or
/// `..` component and no NUL. The root is `/`.
public struct StorePath: Sendable, Hashable, CustomStringConvertible {
    public let components: [String]

    public init(components: [String]) {
        self.components = components
    }

    /// Parses `text`. A missing leading `/` is added; one trailing `/` is
    /// ignored.
    public init(_ text: String) throws {
        guard !text.isEmpty else { throw StoreError.invalidPath("the path is empty") }
        guard !text.utf8.contains(0) else { throw StoreError.invalidPath("the path contains a NUL byte") }
        var body = Substring(text)
        if body.hasPrefix("/") { body = body.dropFirst() }
        if body.hasSuffix("/") { body = body.dropLast() }
        if body.isEmpty {
            components = []
            return
        }
        var parts: [String] = []
        for part in body.split(separator: "/", omittingEmptySubsequences: false) {
            guard !part.isEmpty else { throw StoreError.invalidPath("'\(text)' has an empty component") }
            guard part != "." && part != ".." else {
                throw StoreError.invalidPath("'\(text)' has a '\(part)' component; paths are absolute within the store")
            }
            guard part.utf8.count <= 1024 else { throw StoreError.invalidPath("a component of '\(text)' is longer than 1024 bytes") }
            parts.append(String(part))
        }
        components = parts
    }

    public static let root = StorePath(components: [])

    public var isRoot: Bool { components.isEmpty }
    public var name: String { components.last ?? "" }
    public var parent: StorePath { StorePath(components: Array(components.dropLast())) }

    public func appending(_ name: String) -> StorePath { StorePath(components: components + [name]) }

    /// Whether `self` is `other` or lies below it.
    public func isWithin(_ other: StorePath) -> Bool {
        components.count >= other.components.count && Array(components.prefix(other.components.count)) == other.components
    }

    public var description: String { "/" + components.joined(separator: "/") }
}
