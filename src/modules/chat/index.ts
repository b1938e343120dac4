/** Chat's rooms and messages, as the console reads and moderates them. Its routes are in ./routes.ts. */
export { deleteMessages, listMessages } from "./messages";
export { listRooms } from "./rooms";
