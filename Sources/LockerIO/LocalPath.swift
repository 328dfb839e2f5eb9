/// Paths on the local file system, taken apart as text: no call is made
/// to the file system, and no component is resolved.
public enum LocalPath {
    /// `path` without trailing "/"s, its parent directory ("." for a bare
    /// name, "/" for a name at the root and for "/" itself) and its last
    /// component ("" for "/").
    ///
    /// (Not `NSString.deletingLastPathComponent`, which the Foundation of
    /// this platform stops the process on for a one-character name.)
    public static func split(_ path: String) -> (trimmed: String, parent: String, name: String) {
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return (trimmed, ".", trimmed) }
        var parent = String(trimmed[..<slash])
        while parent.count > 1 && parent.hasSuffix("/") { parent.removeLast() }
        return (trimmed, parent.isEmpty ? "/" : parent, String(trimmed[trimmed.index(after: slash)...]))
    }

    /// The parent directory of `path`, as ``split(_:)`` gives it.
    public static func parent(of path: String) -> String { split(path).parent }

    /// The last component of `path`, as ``split(_:)`` gives it.
    public static func name(of path: String) -> String { split(path).name }
}
