// Keeps the engine library non-empty before its first real source lands.
namespace trainer::engine { int library_anchor = 0; }
