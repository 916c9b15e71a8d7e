// Keeps the parallel library non-empty before its first real source lands.
namespace trainer::parallel { int library_anchor = 0; }
