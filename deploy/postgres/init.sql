-- One database per service: a store belongs to one service (the kit refuses to share one).
CREATE DATABASE metnos_policy OWNER metnos;
CREATE DATABASE metnos_vaglio OWNER metnos;
CREATE DATABASE metnos_approval OWNER metnos;
CREATE DATABASE metnos_planner OWNER metnos;
CREATE DATABASE metnos_gateway OWNER metnos;
