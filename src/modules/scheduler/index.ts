/** Conferences and reservations, as the console lists and changes them. Its routes are in ./routes.ts. */
export { listConferences } from "./conferences";
export { createReservation, deleteReservation, listReservations } from "./reservations";
