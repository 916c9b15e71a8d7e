// Keeps the model library non-empty before its first real source lands.
namespace trainer::model { int library_anchor = 0; }
