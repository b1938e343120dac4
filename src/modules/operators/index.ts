/** The operators, as the admin API makes them and the console signs them in. */
export { createOperator, hashPassword, listOperators, operatorNamed } from "./service";
export { operators } from "./schema";
