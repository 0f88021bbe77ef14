GREETING = "hello from a neighbour module"
