"""HLO programs as data: shapes and layouts (shape.py), the opcode table (opcodes.py), the
IR (ir.py), XLA's text format (lexer.py, parser.py, printer.py), shape inference and the
verifier. The bottom layer of xladist: it imports no other layer but files and errors."""
