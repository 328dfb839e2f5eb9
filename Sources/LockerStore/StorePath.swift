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
        // Split on the bytes, not on Characters: "/" followed by a
        // combining mark is one Character, and would otherwise stay inside
        // a name, to become a path when the object is fetched.
        let slash = UInt8(ascii: "/")
        var body = Array(text.utf8)[...]
        if body.first == slash { body = body.dropFirst() }
        if body.last == slash { body = body.dropLast() }
        if body.isEmpty {
            components = []
            return
        }
        var parts: [String] = []
        for bytes in body.split(separator: slash, omittingEmptySubsequences: false) {
            // Whole UTF-8 sequences: "/" is never part of a longer one.
            let part = String(decoding: bytes, as: UTF8.self)
            guard !bytes.isEmpty else { throw StoreError.invalidPath("'\(text)' has an empty component") }
            guard !bytes.elementsEqual(".".utf8) && !bytes.elementsEqual("..".utf8) else {
                throw StoreError.invalidPath("'\(text)' has a '\(part)' component; paths are absolute within the store")
            }
            guard bytes.count <= 1024 else { throw StoreError.invalidPath("a component of '\(text)' is longer than 1024 bytes") }
            parts.append(part)
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
        components.count >= other.components.count
            && zip(components, other.components).allSatisfy { $0.sameBytes(as: $1) }
    }

    public var description: String { "/" + components.joined(separator: "/") }

    // Equal, and hashed, by the bytes of the components, as the store
    // tells names apart (``Swift/String/sameBytes(as:)``): with String's
    // `==`, "/é" and "/e\u{301}" would be one key of a batch's directories.
    public static func == (a: StorePath, b: StorePath) -> Bool {
        a.components.count == b.components.count && zip(a.components, b.components).allSatisfy { $0.sameBytes(as: $1) }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(components.count)
        for component in components {
            var bytes = component
            bytes.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
            // Where one component ends, so ["ab"] and ["a", "b"] differ.
            hasher.combine(0xFF as UInt8)
        }
    }
}
