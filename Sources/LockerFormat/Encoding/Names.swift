extension String {
    /// Whether the two are the same bytes (UTF-8). Names in the store are
    /// bytes: two names that differ only in Unicode normalization ("é" as
    /// one code point, or as "e" and a combining accent) are two entries,
    /// so a name must be compared this way, never with `==`, which is
    /// true for canonically equivalent strings. Otherwise a header or
    /// record bound to one name would be taken at the other's place.
    public func sameBytes(as other: String) -> Bool {
        let a = utf8, b = other.utf8
        guard a.count == b.count else { return false }
        // A native string's bytes are compared in place; the view's own
        // iteration, which must also serve bridged strings, took 1.2% of
        // a `put -r`'s CPU, in the dictionaries of store paths.
        let inPlace = a.withContiguousStorageIfAvailable { x in
            b.withContiguousStorageIfAvailable { y in x.elementsEqual(y) }
        }
        return (inPlace ?? nil) ?? a.elementsEqual(b)
    }
}
