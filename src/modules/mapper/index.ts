/**
 * The conference mapper's phone numbers and mappings, as the admin API, the console and the SIP
 * gateway use them. Its routes are in ./routes.ts, mounted by the app.
 */
export {
  addPhoneNumber,
  conferenceForMapperId,
  listPhoneNumbers,
  type PhoneNumber,
  removePhoneNumber,
  resolveMapping,
  setDefaultPhoneNumber,
} from "./service";
